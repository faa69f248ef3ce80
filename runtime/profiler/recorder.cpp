#include "runtime/profiler/recorder.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "kiln/dispatch.h"
#include "kiln/error.h"
#include "runtime/core/thread_cache.h"

namespace kiln::profiler::detail {

std::atomic<bool> g_recording{false};
std::atomic<bool> g_gpu_recording{false};

namespace {

struct Session {
  std::mutex mu;
  uint64_t id = 0;  // the recording session; 0 before the first
  bool active = false;
  Options options;
  int64_t start_ns = 0;
  std::vector<std::shared_ptr<ThreadBuffer>> threads;
  std::atomic<uint64_t> next_correlation{1};
};

Session& session() {
  static auto* s = new Session();  // leaked: threads may record during static teardown
  return *s;
}

std::atomic<uint64_t> g_session_id{0};
std::atomic<bool> g_shapes{false};
std::atomic<GpuTimer*> g_gpu_timer{nullptr};

// The calling thread's buffer, registered with the current session; null
// once the thread's copy is gone at thread exit (Note [Thread caches at
// thread exit]): what an exiting thread's flush does is not recorded.
ThreadBuffer* buffer() {
  std::shared_ptr<ThreadBuffer>* mine = ThreadCache<std::shared_ptr<ThreadBuffer>>::get();
  if (!mine) return nullptr;
  std::shared_ptr<ThreadBuffer>& t_buffer = *mine;
  const uint64_t id = g_session_id.load(std::memory_order_acquire);
  if (!t_buffer) {
    t_buffer = std::make_shared<ThreadBuffer>();
    t_buffer->os_tid = static_cast<int64_t>(::syscall(SYS_gettid));
  }
  ThreadBuffer* b = t_buffer.get();
  if (b->session == id) return b;
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.active || s.id != id) return nullptr;  // stopped meanwhile
  std::lock_guard<std::mutex> block(b->mu);
  b->session = id;
  b->index = static_cast<int>(s.threads.size());
  b->events.clear();
  b->open.clear();
  b->launches.clear();
  s.threads.push_back(t_buffer);
  return b;
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool record_shapes() {
  return g_shapes.load(std::memory_order_relaxed);
}

Handle begin(EventKind kind, std::string name, std::vector<std::vector<int64_t>> shapes) {
  ThreadBuffer* b = buffer();
  if (!b) return {};
  RawEvent e;
  e.kind = kind;
  e.name = std::move(name);
  e.shapes = std::move(shapes);
  std::lock_guard<std::mutex> lock(b->mu);
  e.parent = b->open.empty() ? -1 : b->open.back();
  e.depth = static_cast<int32_t>(b->open.size());
  e.start_ns = now_ns();
  const auto index = static_cast<int32_t>(b->events.size());
  b->events.push_back(std::move(e));
  b->open.push_back(index);
  return {b, b->session, index};
}

void end(const Handle& h) {
  const int64_t t = now_ns();
  ThreadBuffer* b = h.buffer;
  std::lock_guard<std::mutex> lock(b->mu);
  // Collected meanwhile (recording stopped), or from an earlier session.
  if (b->session != h.session || static_cast<size_t>(h.index) >= b->events.size()) return;
  b->events[h.index].end_ns = t;
  auto it = std::find(b->open.rbegin(), b->open.rend(), h.index);
  if (it != b->open.rend()) b->open.erase(std::next(it).base());
}

uint64_t launch_point() {
  if (!recording()) return 0;
  ThreadBuffer* b = buffer();
  if (!b) return 0;
  const uint64_t id = session().next_correlation.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(b->mu);
  b->launches.push_back({now_ns(), id, b->open.empty() ? -1 : b->open.back()});
  return id;
}

void set_gpu_timer(GpuTimer* timer) {
  g_gpu_timer.store(timer, std::memory_order_release);
}

GpuTimer* gpu_timer() {
  return g_gpu_timer.load(std::memory_order_acquire);
}

GpuSpan::GpuSpan(int device, EventKind kind, std::string name) {
  if (gpu_recording()) begin(device, kind, std::move(name));
}

void GpuSpan::begin(int device, EventKind kind, std::string name) {
  GpuTimer* timer = gpu_timer();
  if (!timer) return;
  token_ = timer->begin_span(device);
  if (token_ < 0) return;
  kind_ = kind;
  name_ = std::move(name);
  correlation_ = launch_point();
}

GpuSpan::~GpuSpan() {
  if (token_ < 0) return;
  try {
    gpu_timer()->end_span(token_, kind_, std::move(name_), correlation_);
  } catch (const std::exception&) {
    // A failed record only loses this span; the work itself went on.
  }
}

void start_session(const Options& options) {
  Session& s = session();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    KILN_CHECK(!s.active,
               "[profiler] expected no other Profile recording, got one already recording (one "
               "profile at a time per process)");
    s.active = true;
    s.id += 1;
    s.options = options;
    s.threads.clear();
    s.start_ns = now_ns();
    g_shapes.store(options.record_shapes, std::memory_order_relaxed);
    g_session_id.store(s.id, std::memory_order_release);
  }
  GpuTimer* timer = gpu_timer();
  if (options.cuda && timer) {
    timer->start();
    g_gpu_recording.store(true, std::memory_order_relaxed);
  }
  g_recording.store(true, std::memory_order_release);
  kiln::detail::set_dispatch_hook(kiln::detail::kProfilerHook, true);
}

Collected stop_session() {
  Session& s = session();
  kiln::detail::set_dispatch_hook(kiln::detail::kProfilerHook, false);
  g_recording.store(false, std::memory_order_release);
  const bool gpu = g_gpu_recording.exchange(false);
  const int64_t stop_ns = now_ns();
  std::vector<std::shared_ptr<ThreadBuffer>> threads;
  Collected out;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.active) return out;
    s.active = false;
    threads.swap(s.threads);
    out.start_ns = s.start_ns;
  }
  std::vector<Event> gpu_events;
  if (gpu) gpu_events = gpu_timer()->stop();

  // CPU events thread by thread; parents become indices into the whole list.
  for (const auto& b : threads) {
    std::lock_guard<std::mutex> lock(b->mu);
    const int64_t base = static_cast<int64_t>(out.events.size());
    for (RawEvent& r : b->events) {
      Event e;
      e.kind = r.kind;
      e.name = std::move(r.name);
      e.start_ns = r.start_ns - out.start_ns;
      e.end_ns = (r.end_ns < 0 ? stop_ns : r.end_ns) - out.start_ns;
      e.thread = b->index;
      e.parent = r.parent < 0 ? -1 : base + r.parent;
      e.depth = r.depth;
      e.shapes = std::move(r.shapes);
      out.events.push_back(std::move(e));
    }
    out.thread_os_ids.push_back(b->os_tid);
    for (const RawLaunch& l : b->launches) {
      out.launches.push_back({b->index, l.time_ns - out.start_ns, l.correlation,
                              l.enclosing < 0 ? -1 : base + l.enclosing});
    }
    b->events.clear();
    b->open.clear();
    b->launches.clear();
  }
  for (Event& e : gpu_events) {
    e.start_ns -= out.start_ns;
    e.end_ns -= out.start_ns;
    out.events.push_back(std::move(e));
  }
  return out;
}

}  // namespace kiln::profiler::detail
