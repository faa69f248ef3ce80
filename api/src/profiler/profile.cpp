// kiln::profiler::Profile and Range: the user's side of runtime/profiler/recorder.h.

#include <cstdio>
#include <fstream>

#include "api/src/profiler/profile_impl.h"
#include "kiln/error.h"

namespace kiln::profiler {

const char* event_kind_name(EventKind k) {
  switch (k) {
    case EventKind::Op:
      return "op";
    case EventKind::Range:
      return "range";
    case EventKind::Compiled:
      return "compiled";
    case EventKind::CpuKernel:
      return "cpu_kernel";
    case EventKind::GpuKernel:
      return "kernel";
    case EventKind::GpuOp:
      return "gpu_op";
    case EventKind::GpuGraph:
      return "cuda_graph";
  }
  return "?";
}

Profile::Profile(Options options, bool start_now) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  if (start_now) start();
}

Profile::~Profile() {
  if (!impl_->recording) return;
  try {
    stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[kiln] profiler: stopping at destruction failed: %s\n", e.what());
  }
}

void Profile::start() {
  KILN_CHECK(!impl_->recording, "[profiler] start: expected a stopped Profile, got one recording");
  detail::start_session(impl_->options);
  impl_->recording = true;
  impl_->data = {};
}

void Profile::stop() {
  if (!impl_->recording) return;
  impl_->recording = false;
  impl_->data = detail::stop_session();
}

bool Profile::recording() const {
  return impl_->recording;
}

const Profile::Impl& Profile::Impl::stopped(const Profile& p, const char* what) {
  KILN_CHECK(!p.impl_->recording, "[profiler] ", what,
             ": expected a stopped Profile (call stop() first), got one still recording");
  return *p.impl_;
}

const std::vector<Event>& Profile::events() const {
  return Impl::stopped(*this, "events").data.events;
}

const std::vector<Launch>& Profile::launches() const {
  return Impl::stopped(*this, "launches").data.launches;
}

KeyAverages Profile::key_averages(bool group_by_shape) const {
  return compute_key_averages(Impl::stopped(*this, "key_averages").data, group_by_shape);
}

std::string Profile::chrome_trace() const {
  return format_chrome_trace(Impl::stopped(*this, "chrome_trace").data);
}

void Profile::export_chrome_trace(const std::string& path) const {
  const std::string text = chrome_trace();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(f.good(), "[profiler] export_chrome_trace: expected a writable path, got '", path,
             "'");
  f << text;
  f.close();
  KILN_CHECK(!f.fail(), "[profiler] export_chrome_trace: writing '", path, "' failed");
}

Range::Range(std::string_view name) {
  if (!detail::recording()) return;
  detail::Handle h = detail::begin(EventKind::Range, std::string(name));
  buffer_ = h.buffer;
  session_ = h.session;
  index_ = h.index;
}

Range::~Range() {
  if (buffer_) detail::end({static_cast<detail::ThreadBuffer*>(buffer_), session_, index_});
}

}  // namespace kiln::profiler
