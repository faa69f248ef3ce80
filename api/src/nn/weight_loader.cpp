#include "api/src/nn/weight_loader.h"

#include <set>

#include "kiln/jit.h"
#include "kiln/ops.h"

namespace kiln::nn {

void load_weights(const VisitFn& visit, const Checkpoint& checkpoint, const std::string& model,
                  Device device, DType dtype, const WeightMapping& mapping) {
  std::set<std::string> used;
  materialize(visit, [&](const std::string& name, const Tensor& t, TensorKind kind) -> Tensor {
    if (kind == TensorKind::Buffer) return t.to(device, is_floating(t.dtype()) ? dtype : t.dtype());
    const std::string file = mapping.file_name ? mapping.file_name(name) : name;
    const bool transposed = mapping.transposed && mapping.transposed(name);
    std::vector<int64_t> expected = t.sizes().vec();
    if (transposed) std::swap(expected[0], expected[1]);
    KILN_CHECK(checkpoint.contains(file), "[", model, "] expected parameter '", file, "' of shape ",
               IntArrayRef(expected), " in ", checkpoint.path(), ", got none");
    const TensorInfo& info = checkpoint.info(file);
    check_parameter_shape(model, file, expected, info.shape, checkpoint.path());
    KILN_CHECK(!is_floating(t.dtype()) || is_floating(info.dtype), "[", model,
               "] expected parameter '", file, "' of a floating dtype in ", checkpoint.path(),
               ", got ", info.dtype);
    used.insert(file);
    // Convert on the device the weights end on (Note [Mapped checkpoints]).
    Tensor w = checkpoint.tensor(file, device, dtype);
    return transposed ? w.t().contiguous() : w;
  });
  for (const std::string& name : checkpoint.names()) {
    KILN_CHECK(used.count(name) || (mapping.ignorable && mapping.ignorable(name)), "[", model,
               "] expected only the parameters of its config in ", checkpoint.path(), ", got '",
               name, "' (a config with fewer layers or other options than the checkpoint?)");
  }
}

DType checkpoint_dtype(const Checkpoint& checkpoint, const std::string& name,
                       const std::string& model) {
  if (!checkpoint.contains(name)) return kFloat32;
  const DType dtype = checkpoint.info(name).dtype;
  KILN_CHECK(is_floating(dtype), "[", model, "] expected parameter '", name,
             "' of a floating dtype in ", checkpoint.path(),
             " (the model's dtype when none is given), got ", dtype);
  return dtype;
}

nlohmann::json metadata_as_json(const std::map<std::string, std::string>& metadata) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : metadata) {
    // Numbers and booleans written as strings are read back as what they say.
    nlohmann::json v = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    out[key] = v.is_number() || v.is_boolean() ? v : nlohmann::json(value);
  }
  return out;
}

}  // namespace kiln::nn
