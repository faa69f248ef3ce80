#pragma once

// Every generated op kernel's source in its main variants, as (name, source)
// pairs: the NVRTC source test compiles each one for sm_90 and sm_80.

#include <string>
#include <utility>
#include <vector>

namespace kiln::jit::cuda {

using NamedSources = std::vector<std::pair<std::string, std::string>>;

// All of the lists below (kiln built without CUDA: a stub that throws).
NamedSources op_source_samples();

NamedSources norm_source_samples();
NamedSources reduce_source_samples();
NamedSources index_source_samples();
NamedSources scan_source_samples();
NamedSources sort_source_samples();
NamedSources shape_source_samples();
NamedSources int_matmul_source_samples();
NamedSources attention_source_samples();
NamedSources embedding_renorm_source_samples();
NamedSources gemv_source_samples();

}  // namespace kiln::jit::cuda
