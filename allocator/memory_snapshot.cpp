#include "allocator/memory_snapshot.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kiln::alloc {

// Note [Memory snapshot JSON]
// MemorySnapshot::to_json() writes the layout of PyTorch's
// torch.cuda.memory._snapshot(), with its key names, so tools written for it
// read kiln's:
//   {"segments": [{"device", "address", "total_size", "allocated_size",
//                  "active_size", "requested_size", "stream",
//                  "segment_type": "small" | "large",
//                  "segment_pool_id": [0, pool] (pool 0: the shared pools),
//                  "is_expandable": false, "frames": [],
//                  "blocks": [{"address", "size", "requested_size",
//                              "state": "active_allocated" |
//                                       "active_pending_free" | "inactive",
//                              "frames": []}]}],
//    "device_traces": [[] per device]}
// Addresses and streams are integers; there are no stack frames and no trace
// of past allocations (kiln keeps no history), so of PyTorch's memory
// visualizer (pytorch.org/memory_viz) the segment views apply. The
// visualizer reads Python pickles, not JSON; one line converts:
//   python3 -c "import json,pickle,sys; pickle.dump(json.load(open(sys.argv[1])),
//   open(sys.argv[2],'wb'))" snap.json snap.pickle

void append_snapshot(cuda::MemorySnapshot& out, const std::vector<SegmentInfo>& segments,
                     int device) {
  for (const SegmentInfo& s : segments) {
    cuda::MemorySegment seg;
    seg.device = device;
    seg.address = static_cast<uint64_t>(s.address);
    seg.total_size = static_cast<int64_t>(s.size);
    seg.stream = static_cast<uint64_t>(s.stream.handle);
    seg.is_small = s.is_small;
    seg.pool = s.pool;
    for (const SegmentInfo::BlockInfo& b : s.blocks) {
      cuda::MemoryBlock blk;
      blk.address = static_cast<uint64_t>(b.address);
      blk.size = static_cast<int64_t>(b.size);
      blk.requested_size = static_cast<int64_t>(b.requested);
      blk.state = b.allocated         ? cuda::MemoryBlock::State::ActiveAllocated
                  : b.awaiting_events ? cuda::MemoryBlock::State::ActivePendingFree
                                      : cuda::MemoryBlock::State::Inactive;
      if (b.allocated) seg.allocated_size += blk.size;
      if (blk.state != cuda::MemoryBlock::State::Inactive) seg.active_size += blk.size;
      seg.requested_size += blk.requested_size;
      seg.blocks.push_back(blk);
    }
    out.segments.push_back(std::move(seg));
  }
}

}  // namespace kiln::alloc

namespace kiln::cuda {

std::string MemorySnapshot::to_json() const {
  using nlohmann::json;
  json segs = json::array();
  int devices = 0;
  for (const MemorySegment& s : segments) {
    devices = std::max(devices, s.device + 1);
    json blocks = json::array();
    for (const MemoryBlock& b : s.blocks) {
      const char* state = b.state == MemoryBlock::State::ActiveAllocated     ? "active_allocated"
                          : b.state == MemoryBlock::State::ActivePendingFree ? "active_pending_free"
                                                                             : "inactive";
      blocks.push_back({{"address", b.address},
                        {"size", b.size},
                        {"requested_size", b.requested_size},
                        {"state", state},
                        {"frames", json::array()}});
    }
    segs.push_back({{"device", s.device},
                    {"address", s.address},
                    {"total_size", s.total_size},
                    {"allocated_size", s.allocated_size},
                    {"active_size", s.active_size},
                    {"requested_size", s.requested_size},
                    {"stream", s.stream},
                    {"segment_type", s.is_small ? "small" : "large"},
                    {"segment_pool_id", json::array({0, s.pool})},
                    {"is_expandable", false},
                    {"frames", json::array()},
                    {"blocks", std::move(blocks)}});
  }
  json traces = json::array();
  for (int d = 0; d < devices; ++d) traces.push_back(json::array());
  return json{{"segments", std::move(segs)}, {"device_traces", std::move(traces)}}.dump();
}

}  // namespace kiln::cuda
