#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "kiln/api.h"

namespace kiln {

enum class DeviceType : int8_t { CPU, CUDA, Meta };
constexpr bool is_valid_device_type(DeviceType t) {
  return t == DeviceType::CPU || t == DeviceType::CUDA || t == DeviceType::Meta;
}

// Where a tensor's data lives. Meta tensors have sizes, strides and a dtype but no data.
class KILN_API Device {
 public:
  // Indices run 0..kMaxIndex (they are stored in 8 bits); any other throws
  // "[device] expected a device index 0..127, got 300", and a type that is
  // none of DeviceType's (a cast integer) throws "[device] expected a device
  // type cpu, cuda or meta, got an invalid device type (7)". Every Device is
  // built here, so every function taking one takes a valid one.
  static constexpr int kMaxIndex = 127;
  constexpr Device() = default;
  constexpr Device(DeviceType type, int index) : type_(type), index_(static_cast<int8_t>(index)) {
    if (!is_valid_device_type(type)) fail_type(type);
    if (index < 0 || index > kMaxIndex) fail_index(index);
  }
  // "cpu", "cuda", "cuda:1", "meta"
  explicit Device(std::string_view spec);

  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }
  static constexpr Device meta() { return Device(DeviceType::Meta, 0); }

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type_ == DeviceType::CUDA; }
  constexpr bool is_meta() const { return type_ == DeviceType::Meta; }
  std::string str() const;

  constexpr bool operator==(const Device&) const = default;

 private:
  [[noreturn]] static void fail_index(int index);
  [[noreturn]] static void fail_type(DeviceType type);
  DeviceType type_ = DeviceType::CPU;
  int8_t index_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, Device d) {
  return os << d.str();
}

}  // namespace kiln
