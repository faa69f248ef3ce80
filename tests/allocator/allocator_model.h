#pragma once

// An independent model of the caching allocator's policy for tests: segments
// as lists of blocks, best fit found by a linear scan, merging by a sweep.
// It predicts every pointer the allocator returns and every statistic.

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"

namespace kiln::alloc::testing {

class AllocatorModel {
 public:
  enum class State { Free, Allocated, Pending };
  struct Block {
    size_t offset;
    size_t size;
    State state = State::Free;
    std::multiset<StreamId> outstanding;  // streams whose events are not complete
    std::vector<StreamId> uses;           // record_stream while allocated
  };
  struct Segment {
    uintptr_t address;
    size_t size;
    StreamId stream;
    bool small;
    std::vector<Block> blocks;  // by offset
  };

  // The block the allocator should hand out, or the size of the segment it
  // should ask for first (then call take_new_segment with its address).
  struct Prediction {
    bool found = false;
    uintptr_t ptr = 0;
    size_t new_segment_size = 0;
  };

  static size_t round(size_t n) { return n < 512 ? 512 : (n + 511) / 512 * 512; }

  Prediction predict(size_t nbytes, StreamId stream) {
    process();
    const size_t size = round(nbytes);
    const bool small = size <= (size_t{1} << 20);
    Segment* best_seg = nullptr;
    size_t best_index = 0;
    for (auto& seg : segments_) {
      if (seg.stream != stream || seg.small != small) continue;
      for (size_t i = 0; i < seg.blocks.size(); ++i) {
        const Block& b = seg.blocks[i];
        if (b.state != State::Free || b.size < size) continue;
        if (!best_seg) {
          best_seg = &seg, best_index = i;
          continue;
        }
        const Block& cur = best_seg->blocks[best_index];
        if (b.size < cur.size ||
            (b.size == cur.size && seg.address + b.offset < best_seg->address + cur.offset)) {
          best_seg = &seg, best_index = i;
        }
      }
    }
    Prediction p;
    if (best_seg) {
      p.found = true;
      p.ptr = best_seg->address + best_seg->blocks[best_index].offset;
    } else {
      p.new_segment_size = small                       ? (size_t{2} << 20)
                           : size < (size_t{10} << 20) ? (size_t{20} << 20)
                                                       : (size + (size_t{2} << 20) - 1) /
                                                             (size_t{2} << 20) * (size_t{2} << 20);
    }
    return p;
  }

  void add_segment(uintptr_t address, size_t size, StreamId stream, bool small) {
    segments_.push_back(Segment{address, size, stream, small, {Block{0, size}}});
    reserved_alloc_ += size;
  }

  // Marks the free block at `ptr` allocated for `nbytes`, splitting as the policy says.
  void take(uintptr_t ptr, size_t nbytes) {
    const size_t size = round(nbytes);
    auto [seg, i] = find(ptr);
    Block& b = seg->blocks[i];
    const size_t rest = b.size - size;
    const bool split = seg->small ? rest >= 512 : rest > (size_t{1} << 20);
    if (split) {
      Block r{b.offset + size, rest};
      b.size = size;
      seg->blocks.insert(seg->blocks.begin() + static_cast<long>(i) + 1, r);
    }
    seg->blocks[i].state = State::Allocated;
    alloc_bytes_total_ += seg->blocks[i].size;
  }

  void record_stream(uintptr_t ptr, StreamId stream) {
    auto [seg, i] = find(ptr);
    Block& b = seg->blocks[i];
    if (stream == seg->stream) return;
    if (std::find(b.uses.begin(), b.uses.end(), stream) == b.uses.end()) b.uses.push_back(stream);
  }

  void free(uintptr_t ptr) {
    auto [seg, i] = find(ptr);
    Block& b = seg->blocks[i];
    freed_bytes_total_ += b.size;
    if (b.uses.empty()) {
      b.state = State::Free;
      merge(*seg);
    } else {
      b.state = State::Pending;
      for (StreamId s : b.uses) b.outstanding.insert(s);
      b.uses.clear();
    }
  }

  void complete_stream(StreamId s) {
    for (auto& seg : segments_) {
      for (auto& b : seg.blocks) b.outstanding.erase(s);
    }
  }

  // empty_cache(): wait for everything, then drop whole free segments. Returns
  // the addresses of the segments that go.
  std::set<uintptr_t> empty_cache() {
    for (auto& seg : segments_) {
      for (auto& b : seg.blocks) b.outstanding.clear();
    }
    process();
    std::set<uintptr_t> gone;
    std::vector<Segment> kept;
    for (auto& seg : segments_) {
      if (seg.blocks.size() == 1 && seg.blocks[0].state == State::Free) {
        gone.insert(seg.address);
        reserved_freed_ += seg.size;
      } else {
        kept.push_back(seg);
      }
    }
    segments_ = kept;
    return gone;
  }

  // Current values per pool kind: all, small, large.
  struct Now {
    int64_t allocated[3] = {}, reserved[3] = {}, active[3] = {}, allocations[3] = {},
            segments[3] = {}, active_blocks[3] = {};
  };
  Now now() const {
    Now n;
    for (const auto& seg : segments_) {
      int k = seg.small ? 1 : 2;
      for (int j : {0, k}) {
        n.reserved[j] += static_cast<int64_t>(seg.size);
        n.segments[j] += 1;
      }
      for (const auto& b : seg.blocks) {
        for (int j : {0, k}) {
          if (b.state == State::Allocated) {
            n.allocated[j] += static_cast<int64_t>(b.size);
            n.allocations[j] += 1;
          }
          if (b.state != State::Free) {
            n.active[j] += static_cast<int64_t>(b.size);
            n.active_blocks[j] += 1;
          }
        }
      }
    }
    return n;
  }

  int64_t allocated_total() const { return static_cast<int64_t>(alloc_bytes_total_); }
  int64_t freed_total() const { return static_cast<int64_t>(freed_bytes_total_); }
  int64_t reserved_total() const { return static_cast<int64_t>(reserved_alloc_); }
  int64_t reserved_freed() const { return static_cast<int64_t>(reserved_freed_); }
  const std::vector<Segment>& segments() const { return segments_; }

 private:
  std::pair<Segment*, size_t> find(uintptr_t ptr) {
    for (auto& seg : segments_) {
      if (ptr < seg.address || ptr >= seg.address + seg.size) continue;
      for (size_t i = 0; i < seg.blocks.size(); ++i) {
        if (seg.address + seg.blocks[i].offset == ptr) return {&seg, i};
      }
    }
    throw std::runtime_error("allocator model: no block at that address");
  }

  // Pending blocks whose events are all complete become free (at allocate()).
  void process() {
    for (auto& seg : segments_) {
      bool changed = false;
      for (auto& b : seg.blocks) {
        if (b.state == State::Pending && b.outstanding.empty()) {
          b.state = State::Free;
          changed = true;
        }
      }
      if (changed) merge(seg);
    }
  }

  static void merge(Segment& seg) {
    std::vector<Block> out;
    for (auto& b : seg.blocks) {
      if (!out.empty() && out.back().state == State::Free && b.state == State::Free) {
        out.back().size += b.size;
      } else {
        out.push_back(b);
      }
    }
    seg.blocks = out;
  }

  std::vector<Segment> segments_;
  size_t alloc_bytes_total_ = 0, freed_bytes_total_ = 0, reserved_alloc_ = 0, reserved_freed_ = 0;
};

}  // namespace kiln::alloc::testing
