// graphs/ in a build without the CUDA toolkit: nothing can be captured.

#include <cstdint>

#include "graphs/graph.h"
#include "kiln/error.h"

namespace kiln::graphs {

struct Capture::Impl {};
struct Graph::Impl {};

Capture::Capture(Device) {
  KILN_FAIL("[graphs] kiln was built without CUDA: expected a CUDA build to capture graphs");
}
Capture::~Capture() = default;
void* Capture::static_buffer(size_t) {
  return nullptr;
}
void Capture::begin() {}
int Capture::copy_in(void*, const void*, size_t) {
  return 0;
}
int Capture::copy_out(void*, const void*, size_t) {
  return 0;
}
int Capture::bind(const void*, size_t, std::string) {
  return 0;
}
void Capture::allow_host_values(const void*, size_t) {}
size_t Capture::opaque_nodes() {
  return 0;
}
void Capture::begin_step() {}
bool Capture::step_added_opaque() {
  return false;
}
void Capture::begin_probe() {}
bool Capture::end_probe(const std::vector<Move>&, std::string*) {
  return false;
}
std::unique_ptr<Graph> Capture::finish() {
  return nullptr;
}

Graph::Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Graph::~Graph() = default;
void Graph::set_copy_source(int, const void*) {}
void Graph::set_copy_destination(int, void*) {}
void Graph::set_binding(int, const void*) {}
bool Graph::keeps_alignment(int, const void*) const {
  return true;
}
bool Graph::holds_library_pointers(int) const {
  return false;
}
void Graph::update() {}
void Graph::launch() {}
void Graph::check_errors() const {}
size_t Graph::nodes() const {
  return 0;
}
size_t Graph::patched_nodes() const {
  return 0;
}
size_t Graph::early_edges() const {
  return 0;
}
size_t Graph::pool_bytes() const {
  return 0;
}
double Graph::capture_ms() const {
  return 0;
}
double Graph::instantiate_ms() const {
  return 0;
}

std::string node_kernels_source() {
  return {};
}

bool available() {
  return false;
}

size_t library_probe_bytes() {
  return SIZE_MAX;
}

size_t set_library_probe_bytes(size_t) {
  return SIZE_MAX;
}

}  // namespace kiln::graphs
