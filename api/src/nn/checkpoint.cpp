// A checkpoint of one or more safetensors files: Hugging Face shards through
// model.safetensors.index.json, whose "weight_map" names each tensor's file.

#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "api/src/nn/json_file.h"
#include "kiln/nn/safetensors.h"

namespace kiln::nn {
namespace {

using json = nlohmann::json;

bool is_dir(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& path) {
  std::string file = path;
  if (is_dir(path)) {
    if (exists(path + "/model.safetensors.index.json")) {
      file = path + "/model.safetensors.index.json";
    } else if (exists(path + "/model.safetensors")) {
      file = path + "/model.safetensors";
    } else {
      KILN_FAIL(
          "[checkpoint] expected model.safetensors or model.safetensors.index.json in the "
          "folder '",
          path, "', got neither");
    }
  }
  Checkpoint c;
  c.path_ = file;
  if (!ends_with(file, ".index.json")) {
    c.files_.push_back(SafetensorsFile::open(file));
    for (const std::string& name : c.files_[0].names()) c.where_[name] = 0;
    return c;
  }
  const json index = read_json_file(file, "checkpoint");
  KILN_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             "[checkpoint] expected an object with a \"weight_map\" object in ", file);
  const std::string folder = folder_of(file);
  std::map<std::string, size_t> shard_index;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    const json& shard = it.value();
    KILN_CHECK(shard.is_string(), "[checkpoint] expected a file name for '", it.key(), "' in ",
               file, ", got ", json_brief(shard));
    const std::string& name = shard.get_ref<const std::string&>();
    // Shards live beside the index: a path elsewhere is not a Hugging Face shard.
    KILN_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
               "[checkpoint] expected a shard file name in the index's folder for '", it.key(),
               "' in ", file, ", got '", name, "'");
    auto [s, fresh] = shard_index.emplace(name, c.files_.size());
    if (fresh) c.files_.push_back(SafetensorsFile::open(folder + "/" + name));
    KILN_CHECK(c.files_[s->second].contains(it.key()), "[checkpoint] expected '", it.key(), "' in ",
               c.files_[s->second].path(), " as ", file, " says, got no such tensor");
    c.where_[it.key()] = s->second;
  }
  KILN_CHECK(!c.files_.empty(), "[checkpoint] expected at least one tensor in ", file,
             ", got an empty weight_map");
  return c;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

const SafetensorsFile& Checkpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  KILN_CHECK(it != where_.end(), "[checkpoint] expected a tensor named '", name, "' in ", path_,
             ", got none");
  return files_[it->second];
}

const TensorInfo& Checkpoint::info(const std::string& name) const {
  return file_of(name).info(name);
}

const std::map<std::string, std::string>& Checkpoint::metadata() const {
  static const std::map<std::string, std::string> kNone;
  return files_.empty() ? kNone : files_[0].metadata();
}

Tensor Checkpoint::tensor(const std::string& name, Device device,
                          std::optional<DType> dtype) const {
  return file_of(name).tensor(name, device, dtype);
}

}  // namespace kiln::nn
