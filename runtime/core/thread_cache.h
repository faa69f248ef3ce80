#pragma once

// Per-thread caches that stay safe to ask for while the thread exits.
//
// Note [Thread caches at thread exit]
// A thread's lazy work can run after its thread_local objects have begun to
// be destroyed: the thread's trace is flushed by the destructor of
// TraceBuffer's thread_local Holder (Note [Lazy trace]), so that what the
// thread leaves pending (a result handed to another thread, a tensor still
// referenced) gets computed and the trace's node/marker cycle is broken. That
// flush runs the whole pipeline: decompositions, passes, the memory plan,
// code generation, kernels, the profiler. C++ destroys a thread's
// thread_locals in the reverse order of their construction, and each cache
// those stages keep is built on its first use, usually after the Holder (the
// Holder is built by the thread's first recorded op, the caches by its first
// flush). So at exit they are already destroyed when the Holder's flush
// reaches them, and a plain thread_local would hand it freed memory.
//
// Ordering the caches before the Holder would need every cache in the tree
// (and every new one) touched from one place, and breaks silently when one is
// missed; handing the work to a thread that outlives this one would add a
// thread to stop at process exit and run the flush away from the thread
// state (autocast, eager mode, current streams) it was recorded under.
// Instead every non-trivially destructible thread_local that a flush can
// reach lives in a ThreadCache: get() returns null once the thread's copy is
// destroyed (a flag that is a plain bool, so it is readable until the
// thread's storage goes), and the caller then works without the cache, on a
// value of its own. A cache first asked for during the exit flush is built
// then and destroyed after it. The node spares (Note [Node buffers]) are one;
// the impl pools (Note [Impl pools]) and the CPU allocator's thread cache
// keep flags of their own by the same rule. Trivially destructible
// thread_locals (counters, flags, plain pointers) need nothing: their storage
// lasts until the thread is gone.

namespace kiln {

// One thread_local T per thread and Tag (a tag keeps two caches of the same
// type apart: `ThreadCache<Map, struct ByOpTag>`).
template <class T, class Tag = T>
class ThreadCache {
 public:
  // This thread's cache, built on first use; null once destroyed at thread
  // exit (the caller then does without it).
  static T* get() {
    if (gone_) return nullptr;
    static thread_local Slot slot;
    return &slot.value;
  }

 private:
  struct Slot {
    T value{};
    ~Slot() { gone_ = true; }
  };
  static inline thread_local bool gone_ = false;
};

}  // namespace kiln
