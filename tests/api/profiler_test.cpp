// kiln::profiler on a 2-layer GPT-2 (lazy, eager and compiled, CPU and CUDA):
// the events, the key_averages table and the Chrome trace checked
// structurally: the ops and kernels present, times positive, nesting valid on
// every track, self times adding up, the JSON parsing with every event on a
// named track and every flow arrow complete.

#include "kiln/profiler.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::profiler::Event;
using kiln::profiler::EventKind;
using kiln::profiler::Profile;

kiln::nn::GPT2Config tiny_config() {
  kiln::nn::GPT2Config c;
  c.n_layer = 2;
  c.d_model = 32;
  c.n_head = 2;
  c.vocab = 64;
  c.n_positions = 16;
  return c;
}

std::set<std::string> names_of(const std::vector<Event>& events, EventKind kind) {
  std::set<std::string> s;
  for (const Event& e : events) {
    if (e.kind == kind) s.insert(e.name);
  }
  return s;
}

bool has_prefix(const std::set<std::string>& names, const std::string& prefix) {
  for (const std::string& n : names) {
    if (n.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// Every CPU event sits inside its parent on its thread, one level deeper, and
// events of one thread never partly overlap; GPU events of one stream either
// nest or do not overlap. Times are non-negative and within the profile.
void expect_valid_nesting(const std::vector<Event>& ev) {
  int64_t last_end = 0;
  for (const Event& e : ev) last_end = std::max(last_end, e.end_ns);
  std::map<std::pair<int64_t, uint64_t>, std::vector<const Event*>> tracks;
  for (size_t i = 0; i < ev.size(); ++i) {
    const Event& e = ev[i];
    EXPECT_GE(e.start_ns, 0) << e.name;
    EXPECT_GE(e.duration_ns(), 0) << e.name;
    if (e.on_gpu()) {
      EXPECT_GE(e.device, 0) << e.name;
      EXPECT_NE(e.stream, 0u) << e.name;
      tracks[{-1 - e.device, e.stream}].push_back(&e);
      continue;
    }
    ASSERT_GE(e.thread, 0) << e.name;
    tracks[{e.thread, 0}].push_back(&e);
    if (e.parent < 0) {
      EXPECT_EQ(e.depth, 0) << e.name;
      continue;
    }
    ASSERT_LT(static_cast<size_t>(e.parent), i) << e.name << ": a parent starts first";
    const Event& p = ev[e.parent];
    EXPECT_EQ(p.thread, e.thread) << e.name;
    EXPECT_EQ(e.depth, p.depth + 1) << e.name;
    EXPECT_LE(p.start_ns, e.start_ns) << e.name << " in " << p.name;
    EXPECT_LE(e.end_ns, p.end_ns) << e.name << " in " << p.name;
  }
  for (auto& [track, list] : tracks) {
    std::stable_sort(list.begin(), list.end(), [](const Event* a, const Event* b) {
      return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
    });
    std::vector<const Event*> open;
    for (const Event* e : list) {
      while (!open.empty() && open.back()->end_ns <= e->start_ns) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(e->end_ns, open.back()->end_ns)
            << e->name << " partly overlaps " << open.back()->name;
      }
      open.push_back(e);
    }
  }
}

// The table's self CPU times add up to the time of the outermost events, and
// it has PyTorch's columns.
void expect_valid_table(const Profile& prof) {
  const kiln::profiler::KeyAverages avg = prof.key_averages();
  int64_t self = 0, top = 0;
  for (const auto& r : avg.rows) {
    self += r.self_cpu_ns;
    EXPECT_GE(r.self_cpu_ns, 0) << r.name;
    EXPECT_GE(r.cpu_total_ns, r.self_cpu_ns) << r.name;
    EXPECT_GT(r.calls, 0) << r.name;
  }
  for (const Event& e : prof.events()) {
    if (!e.on_gpu() && e.parent < 0) top += e.duration_ns();
  }
  EXPECT_EQ(self, top);
  const std::string table = avg.table(kiln::profiler::SortBy::CpuTotal, 12);
  for (const char* col : {"Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total",
                          "CPU time avg", "# of Calls", "Self CPU time total:"}) {
    EXPECT_NE(table.find(col), std::string::npos) << col << "\n" << table;
  }
  // Sorted by the chosen column, largest first, 12 rows at most.
  std::istringstream lines(table);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.find("us") != std::string::npos || line.find("ms") != std::string::npos) ++rows;
  }
  EXPECT_LE(rows, 12 + 2) << table;  // rows and the totals
}

// The Chrome trace parses; every event names its phase and sits on a track
// that has a name; complete events have non-negative times; every flow start
// has its end.
std::pair<int, int> track_of(const nlohmann::json& e) {
  return {e["pid"].get<int>(), e["tid"].get<int>()};
}

nlohmann::json expect_valid_trace(const Profile& prof, const std::string& path) {
  prof.export_chrome_trace(path);
  std::ifstream in(path);
  nlohmann::json trace = nlohmann::json::parse(in);
  std::remove(path.c_str());
  EXPECT_TRUE(trace.contains("traceEvents"));
  std::set<std::pair<int, int>> named;
  std::set<int> processes;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") named.insert(track_of(e));
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["pid"].get<int>());
  }
  std::map<uint64_t, int> flows;
  size_t complete = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.contains("ph") || !e.contains("pid") || !e.contains("tid")) {
      ADD_FAILURE() << "an event without a phase or a track: " << e.dump();
      continue;
    }
    if (e["ph"] == "M") continue;
    EXPECT_TRUE(named.count(track_of(e))) << "no track name for " << e.dump();
    EXPECT_TRUE(processes.count(e["pid"].get<int>())) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0.0) << e.dump();
    if (e["ph"] == "X") {
      ++complete;
      EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
      EXPECT_TRUE(e.contains("name") && e.contains("cat")) << e.dump();
    } else if (e["ph"] == "s") {
      flows[e["id"].get<uint64_t>()] += 1;
    } else if (e["ph"] == "f") {
      EXPECT_EQ(e["bp"], "e");
      flows[e["id"].get<uint64_t>()] -= 1;
    } else {
      ADD_FAILURE() << "unexpected phase " << e.dump();
    }
  }
  EXPECT_EQ(complete, prof.events().size());
  for (const auto& [id, balance] : flows) {
    EXPECT_EQ(balance, 0) << "flow " << id;
  }
  return trace;
}

// A profile of one lazy forward, one eager forward and two compiled calls.
void profile_gpt2(kiln::Device device) {
  const kiln::nn::GPT2Config cfg = tiny_config();
  const kiln::nn::GPT2 model = kiln::nn::GPT2::random(cfg, kiln::kFloat32, device, 3);
  Tensor ids = kiln::randint(0, cfg.vocab, {2, 8}).to(device);
  auto step = kiln::jit::compile([&](const Tensor& x) { return model.lm_head(model.forward(x)); },
                                 {.name = "gpt2"});
  kiln::sync();

  Profile prof({.record_shapes = true});
  EXPECT_TRUE(prof.recording());
  {
    kiln::profiler::Range r("lazy forward");
    Tensor logits = model.lm_head(model.forward(ids));
    kiln::sync();
  }
  {
    kiln::profiler::Range r("eager forward");
    kiln::EagerGuard eager;
    Tensor logits = model.lm_head(model.forward(ids));
    kiln::sync();
  }
  for (int i = 0; i < 3; ++i) {
    kiln::profiler::Range r("compiled call");
    Tensor logits = step(ids);
    kiln::sync();
  }
  prof.stop();
  EXPECT_FALSE(prof.recording());
  const std::vector<Event>& ev = prof.events();
  ASSERT_FALSE(ev.empty());

  // Ops at dispatch, with their shapes; the user's ranges; kiln's flushes.
  const auto ops = names_of(ev, EventKind::Op);
  for (const char* op : {"layer_norm", "linear", "embedding"}) {
    EXPECT_TRUE(has_prefix(ops, op)) << op << " missing";
  }
  const auto ranges = names_of(ev, EventKind::Range);
  for (const char* r : {"lazy forward", "eager forward", "compiled call", "kiln::sync"}) {
    EXPECT_TRUE(ranges.count(r)) << r << " missing";
  }
  bool shapes = false;
  for (const Event& e : ev) {
    if (e.kind == EventKind::Op && e.name.rfind("linear", 0) == 0 && !e.shapes.empty()) {
      shapes = shapes || (e.shapes[0].size() == 3 && e.shapes[0][2] == cfg.d_model);
    }
  }
  EXPECT_TRUE(shapes) << "linear's input shape [2, 8, 32] not recorded";
  // Compiled calls and their phases: the first traces and compiles.
  const auto compiled = names_of(ev, EventKind::Compiled);
  for (const char* c : {"jit::compile gpt2", "jit::compile: guards", "jit::compile: trace",
                        "jit::compile: compile", "jit::compile: launch"}) {
    EXPECT_TRUE(compiled.count(c)) << c << " missing";
  }
  if (device.is_cpu()) {
    EXPECT_TRUE(has_prefix(names_of(ev, EventKind::CpuKernel), "cpu_fused"));
  } else {
    // Generated kernels, CUDA ops' spans, and (compiled, reduce-overhead) graph replays.
    EXPECT_FALSE(names_of(ev, EventKind::GpuKernel).empty());
    EXPECT_FALSE(names_of(ev, EventKind::GpuOp).empty());
    EXPECT_TRUE(has_prefix(names_of(ev, EventKind::GpuGraph), "cuda graph ("));
    std::set<uint64_t> launched;
    for (const auto& l : prof.launches()) launched.insert(l.correlation);
    for (const Event& e : ev) {
      if (e.on_gpu()) {
        EXPECT_TRUE(launched.count(e.correlation)) << e.name << " has no launch";
      }
    }
    const auto avg = prof.key_averages();
    int64_t device_time = 0;
    for (const auto& r : avg.rows) device_time += r.self_device_ns;
    EXPECT_GT(device_time, 0);
    EXPECT_NE(avg.table(kiln::profiler::SortBy::SelfDevice).find("Self Device"), std::string::npos);
  }
  // Times positive: each range took time, and the ops inside it.
  for (const Event& e : ev) {
    if (e.kind == EventKind::Range) {
      EXPECT_GT(e.duration_ns(), 0) << e.name;
    }
  }
  expect_valid_nesting(ev);
  expect_valid_table(prof);
  const nlohmann::json trace = expect_valid_trace(prof, kiln::testing::temp_path("profile.json"));
  if (device.is_cuda()) {
    bool arrow = false;
    for (const auto& e : trace["traceEvents"]) arrow = arrow || e["ph"] == "f";
    EXPECT_TRUE(arrow) << "no flow arrow from a launch to its kernel";
  }
  // Grouped by input shape: linear appears once per shape.
  const auto grouped = prof.key_averages(/*group_by_shape=*/true);
  bool shaped_row = false;
  for (const auto& r : grouped.rows) shaped_row = shaped_row || !r.shapes.empty();
  EXPECT_TRUE(shaped_row);
}

TEST(Profiler, Gpt2OnTheCpu) {
  profile_gpt2(kiln::Device::cpu());
}

TEST(Profiler, Gpt2OnCuda) {
  KILN_REQUIRE_CUDA();
  profile_gpt2(kiln::Device::cuda());
}

TEST(Profiler, OffCostsNoDispatchHookAndRecordsNothing) {
  // The dispatcher's one word is zero unless something observes (Note [Dispatch observers]).
  EXPECT_EQ(kiln::detail::g_dispatch_hooks.load(), 0u);
  {
    Profile prof;
    EXPECT_NE(kiln::detail::g_dispatch_hooks.load() & kiln::detail::kProfilerHook, 0u);
  }
  EXPECT_EQ(kiln::detail::g_dispatch_hooks.load(), 0u);
  kiln::set_logs("dispatch");
  EXPECT_EQ(kiln::detail::g_dispatch_hooks.load(), kiln::detail::kDispatchLogHook);
  kiln::set_logs("");
  EXPECT_EQ(kiln::detail::g_dispatch_hooks.load(), 0u);
  // A range outside any profile records nothing and costs nothing to end.
  { kiln::profiler::Range r("nobody listens"); }
  Profile prof({}, /*start_now=*/false);
  prof.stop();
  EXPECT_TRUE(prof.events().empty());
}

TEST(Profiler, EagerOpsThreadsAndErrors) {
  Tensor a = kiln::full({4}, 1.0f), b = kiln::full({4}, 2.0f);
  Profile prof;
  {
    kiln::EagerGuard eager;
    Tensor c = kiln::add(a, b);
    std::thread t([&] {
      kiln::EagerGuard eager_too;
      kiln::profiler::Range r("worker");
      Tensor d = kiln::mul(a, b);
    });
    t.join();
  }
  EXPECT_KILN_ERROR(Profile(), "one profile at a time per process");
  EXPECT_KILN_ERROR(prof.events(), "expected a stopped Profile");
  prof.stop();
  prof.stop();  // idempotent
  const std::vector<Event>& ev = prof.events();
  std::set<int> threads;
  bool add = false, mul_in_worker = false;
  for (const Event& e : ev) {
    threads.insert(e.thread);
    add = add || (e.kind == EventKind::Op && e.name.rfind("add", 0) == 0);
    if (e.kind == EventKind::Op && e.name.rfind("mul", 0) == 0 && e.parent >= 0) {
      mul_in_worker = ev[e.parent].name == "worker" && ev[e.parent].thread == e.thread;
    }
  }
  EXPECT_TRUE(add);
  EXPECT_TRUE(mul_in_worker);
  EXPECT_EQ(threads.size(), 2u);
  const kiln::profiler::KeyAverages table = prof.key_averages();
  const auto* row = table.find("worker");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->calls, 1);
  expect_valid_nesting(ev);
  expect_valid_trace(prof, kiln::testing::temp_path("profile_threads.json"));
  // A new recording starts empty.
  prof.start();
  prof.stop();
  EXPECT_TRUE(prof.events().empty());
}

}  // namespace
