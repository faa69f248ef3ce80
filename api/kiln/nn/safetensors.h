#pragma once

// safetensors checkpoints: one file, or a Hugging Face shard index
// (model.safetensors.index.json). Files are memory-mapped; a CPU tensor is a
// view of the mapped bytes (Note [Mapped checkpoints], api/src/nn/safetensors.cpp).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/api.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// One tensor's entry in a safetensors header.
struct TensorInfo {
  DType dtype = kFloat32;
  std::vector<int64_t> shape;
  int64_t begin = 0;   // byte offset in the data section
  int64_t nbytes = 0;  // numel(shape) * itemsize(dtype)
};

namespace impl {
struct MappedFile;
}

// A validated, memory-mapped safetensors file. Opening checks the whole header
// (types, sizes, offsets inside the data, no overlaps, no duplicate names) and
// raises kiln::Error naming the file and the entry for anything malformed.
// Copies share the mapping; tensors made from it keep it alive.
class KILN_API SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const;
  // Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // The header entry of `name`; an error naming the file when absent.
  const TensorInfo& info(const std::string& name) const;
  // The header's "__metadata__" (string to string), empty when absent.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // `name` on the CPU: a view of the mapped bytes (copy-on-write, so in-place
  // writes stay in this process), or a copy when the bytes are not aligned to
  // the dtype. BOOL bytes other than 0 and 1 are an error.
  Tensor tensor(const std::string& name) const;
  // `name` on `device` in `dtype` (default: the file's): a view on the CPU when
  // nothing changes; on CUDA, a staged copy of the file's bytes, converted there.
  Tensor tensor(const std::string& name, Device device,
                std::optional<DType> dtype = std::nullopt) const;

 private:
  std::shared_ptr<const impl::MappedFile> file_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The tensors of a checkpoint: a .safetensors file, a shard index
// (*.safetensors.index.json, whose "weight_map" names each tensor's shard in
// the index's folder), or a folder holding model.safetensors or
// model.safetensors.index.json.
class KILN_API Checkpoint {
 public:
  static Checkpoint open(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  // The first (or only) file's metadata.
  const std::map<std::string, std::string>& metadata() const;
  Tensor tensor(const std::string& name, Device device = Device::cpu(),
                std::optional<DType> dtype = std::nullopt) const;

 private:
  const SafetensorsFile& file_of(const std::string& name) const;

  std::string path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index in files_
};

// Reads every tensor of a safetensors file onto the CPU, by name (views of
// the mapped file, as SafetensorsFile::tensor).
KILN_API std::map<std::string, Tensor> load_safetensors(const std::string& path);
// Writes tensors to a safetensors file (contiguous copies of each), with
// optional string metadata. Written to a temporary name, then renamed.
KILN_API void save_safetensors(const std::string& path,
                               const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln::nn
