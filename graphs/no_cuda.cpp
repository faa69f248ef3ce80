// graphs/ in a build without the CUDA toolkit: nothing can be captured.

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
std::unique_ptr<Graph> Capture::finish() {
  return nullptr;
}

Graph::Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Graph::~Graph() = default;
void Graph::set_copy_source(int, const void*) {}
void Graph::set_copy_destination(int, void*) {}
void Graph::set_binding(int, const void*) {}
void Graph::update() {}
void Graph::launch() {}
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

std::string node_kernels_source() {
  return {};
}

bool available() {
  return false;
}

}  // namespace kiln::graphs
