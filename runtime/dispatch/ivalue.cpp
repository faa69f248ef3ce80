#include "kiln/ivalue.h"

#include <sstream>

namespace kiln {

Scalar IValue::to_scalar() const {
  switch (tag()) {
    case Tag::Int:
      return Scalar(to_int());
    case Tag::Double:
      return Scalar(to_double());
    case Tag::Bool:
      return Scalar(to_bool());
    case Tag::Scalar:
      return std::get<kiln::Scalar>(v_);
    default:
      break;
  }
  KILN_FAIL("[IValue] expected a number, got ", type_name());
}

const char* IValue::tag_name(Tag tag) {
  switch (tag) {
    case Tag::None:
      return "None";
    case Tag::Tensor:
      return "Tensor";
    case Tag::Int:
      return "int";
    case Tag::Double:
      return "float";
    case Tag::Bool:
      return "bool";
    case Tag::Scalar:
      return "Scalar";
    case Tag::String:
      return "str";
    case Tag::IntList:
      return "int[]";
    case Tag::DoubleList:
      return "float[]";
    case Tag::TensorList:
      return "Tensor[]";
    case Tag::DType:
      return "ScalarType";
    case Tag::Device:
      return "Device";
  }
  return "?";
}

std::string IValue::repr() const {
  std::ostringstream os;
  auto tensor_repr = [&](const kiln::Tensor& t) {
    if (!t.defined()) {
      os << "Tensor(undefined)";
      return;
    }
    os << "Tensor" << t.sizes() << ' ' << t.dtype();
    if (!t.device().is_cpu()) os << ' ' << t.device();
  };
  switch (tag()) {
    case Tag::None:
      os << "None";
      break;
    case Tag::Tensor:
      tensor_repr(to_tensor());
      break;
    case Tag::Int:
      os << to_int();
      break;
    case Tag::Double:
      os << to_double();
      break;
    case Tag::Bool:
      os << (to_bool() ? "True" : "False");
      break;
    case Tag::Scalar:
      os << to_scalar();
      break;
    case Tag::String:
      os << '\'' << to_string() << '\'';
      break;
    case Tag::IntList:
      os << IntArrayRef(to_int_list());
      break;
    case Tag::DoubleList:
      os << ArrayRef<double>(to_double_list());
      break;
    case Tag::TensorList: {
      os << '[';
      const auto& l = to_tensor_list();
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) os << ", ";
        tensor_repr(l[i]);
      }
      os << ']';
      break;
    }
    case Tag::DType:
      os << to_dtype();
      break;
    case Tag::Device:
      os << to_device();
      break;
  }
  return os.str();
}

}  // namespace kiln
