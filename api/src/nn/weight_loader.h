#pragma once

// Fills a model skeleton (meta tensors of the config's shapes) from a
// checkpoint: every parameter must be there with its exact shape, and every
// tensor of the checkpoint must be used or known to be ignorable, else a
// kiln::Error naming the model, the parameter, expected and actual. Private
// to api/src/nn.

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/nn/safetensors.h"

namespace kiln::nn {

struct WeightMapping {
  // The checkpoint's name of a parameter (default: the same name).
  std::function<std::string(const std::string& name)> file_name;
  // True for parameters stored transposed ([in, out]; GPT-2's Conv1D).
  std::function<bool(const std::string& name)> transposed;
  // True for checkpoint tensors that are not parameters (causal-mask buffers,
  // a tied lm_head); any other unused tensor is an error.
  std::function<bool(const std::string& file_name)> ignorable;
};

// Every parameter is floating: a checkpoint tensor of an integer or bool dtype
// for one is an error naming the file and the tensor, not a silent cast.
void load_weights(const VisitFn& visit, const Checkpoint& checkpoint, const std::string& model,
                  Device device, DType dtype, const WeightMapping& mapping);

// The dtype a model loaded without one takes: `name`'s in the checkpoint
// (float32 when absent, so that load_weights names it as missing), which
// must be floating.
DType checkpoint_dtype(const Checkpoint& checkpoint, const std::string& name,
                       const std::string& model);

// safetensors metadata (string to string) as a JSON object, with values that
// read as numbers or booleans converted, so config readers can take it.
nlohmann::json metadata_as_json(const std::map<std::string, std::string>& metadata);

}  // namespace kiln::nn
