#pragma once

// What generate() and sample_tokens share.

#include "kiln/nn/generate.h"

namespace kiln::nn {

// The sampling options' checks, one rule for generate() and sample_tokens()
// (`op` names the caller): a finite temperature >= 0, top_k >= 0, top_p in
// (0, 1].
void check_sampling_options(const GenerateOptions& o, const char* op);

}  // namespace kiln::nn
