#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// A boxed argument or result: what boxed calls, schemas and trace nodes carry.
class KILN_API IValue {
 public:
  enum class Tag : uint8_t {
    None,
    Tensor,
    Int,
    Double,
    Bool,
    Scalar,
    String,
    IntList,
    DoubleList,
    TensorList,
    DType,
    Device,
  };

  IValue() = default;
  IValue(std::nullopt_t) {}                                  // NOLINT(implicit)
  IValue(kiln::Tensor t) : v_(std::move(t)) {}               // NOLINT(implicit)
  IValue(int64_t v) : v_(v) {}                               // NOLINT(implicit)
  IValue(int v) : v_(int64_t{v}) {}                          // NOLINT(implicit)
  IValue(double v) : v_(v) {}                                // NOLINT(implicit)
  IValue(bool v) : v_(v) {}                                  // NOLINT(implicit)
  IValue(kiln::Scalar v) : v_(v) {}                          // NOLINT(implicit)
  IValue(std::string v) : v_(std::move(v)) {}                // NOLINT(implicit)
  IValue(const char* v) : v_(std::string(v)) {}              // NOLINT(implicit)
  IValue(std::vector<int64_t> v) : v_(std::move(v)) {}       // NOLINT(implicit)
  IValue(std::vector<double> v) : v_(std::move(v)) {}        // NOLINT(implicit)
  IValue(std::vector<kiln::Tensor> v) : v_(std::move(v)) {}  // NOLINT(implicit)
  IValue(kiln::DType v) : v_(v) {}                           // NOLINT(implicit)
  IValue(kiln::Device v) : v_(v) {}                          // NOLINT(implicit)
  template <class T>
  IValue(const std::optional<T>& v) {  // NOLINT(implicit)
    if (v) *this = IValue(*v);
  }

  Tag tag() const { return static_cast<Tag>(v_.index()); }
  bool is_none() const { return tag() == Tag::None; }
  bool is_tensor() const { return tag() == Tag::Tensor; }
  bool is_int() const { return tag() == Tag::Int; }
  bool is_double() const { return tag() == Tag::Double; }
  bool is_bool() const { return tag() == Tag::Bool; }
  bool is_scalar() const { return tag() == Tag::Scalar; }
  bool is_string() const { return tag() == Tag::String; }
  bool is_int_list() const { return tag() == Tag::IntList; }
  bool is_double_list() const { return tag() == Tag::DoubleList; }
  bool is_tensor_list() const { return tag() == Tag::TensorList; }
  bool is_dtype() const { return tag() == Tag::DType; }
  bool is_device() const { return tag() == Tag::Device; }
  // Int, Double, Bool and Scalar all read as a Scalar.
  bool is_number() const { return is_int() || is_double() || is_bool() || is_scalar(); }

  const kiln::Tensor& to_tensor() const { return std::get<kiln::Tensor>(v_); }
  kiln::Tensor& to_tensor() { return std::get<kiln::Tensor>(v_); }
  int64_t to_int() const { return std::get<int64_t>(v_); }
  double to_double() const { return std::get<double>(v_); }
  bool to_bool() const { return std::get<bool>(v_); }
  kiln::Scalar to_scalar() const;
  const std::string& to_string() const { return std::get<std::string>(v_); }
  const std::vector<int64_t>& to_int_list() const { return std::get<std::vector<int64_t>>(v_); }
  const std::vector<double>& to_double_list() const { return std::get<std::vector<double>>(v_); }
  const std::vector<kiln::Tensor>& to_tensor_list() const {
    return std::get<std::vector<kiln::Tensor>>(v_);
  }
  kiln::DType to_dtype() const { return std::get<kiln::DType>(v_); }
  kiln::Device to_device() const { return std::get<kiln::Device>(v_); }

  // "Tensor", "int", ... for error messages.
  const char* type_name() const { return tag_name(tag()); }
  static const char* tag_name(Tag tag);
  // A short rendering: numbers, lists, "Tensor[2, 3] float32".
  std::string repr() const;

 private:
  std::variant<std::monostate, kiln::Tensor, int64_t, double, bool, kiln::Scalar, std::string,
               std::vector<int64_t>, std::vector<double>, std::vector<kiln::Tensor>, kiln::DType,
               kiln::Device>
      v_;
};

using Stack = std::vector<IValue>;

}  // namespace kiln
