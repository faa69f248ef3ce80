#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/api.h"
#include "kiln/ivalue.h"

namespace kiln {

// Argument types a schema can name, as PyTorch spells them.
enum class ArgType : uint8_t {
  Tensor,      // Tensor
  TensorList,  // Tensor[]
  Int,         // int
  IntList,     // int[] (int[2] fixes the length)
  Float,       // float
  FloatList,   // float[]
  Bool,        // bool
  Scalar,      // Scalar
  DType,       // ScalarType
  Device,      // Device
  Str,         // str
};

struct Argument {
  std::string name;
  ArgType type = ArgType::Tensor;
  bool optional = false;    // "T?": None allowed
  bool kwarg_only = false;  // after "*"
  bool is_write = false;    // "Tensor(a!)": the op writes this tensor
  char alias_set = 0;       // the letter in "(a)" / "(a!)", 0 when none
  int64_t fixed_size = -1;  // N in "int[N]"
  std::optional<IValue> default_value;
};

// A parsed schema: "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor".
struct KILN_API FunctionSchema {
  std::string ns;        // "kiln" for built-ins
  std::string name;      // "add"
  std::string overload;  // "Tensor", or empty
  std::vector<Argument> arguments;
  std::vector<Argument> returns;

  // "add.Tensor" (with "ns::" for namespaces other than kiln).
  std::string full_name() const;
  // The schema text, normalized.
  std::string str() const;
  // True when some argument is written (in-place and out= variants).
  bool is_mutable() const;
  int argument_index(std::string_view name) const;
};

// Throws kiln::Error naming the position of a syntax error.
KILN_API FunctionSchema parse_schema(std::string_view text, std::string_view default_ns = "kiln");
KILN_API const char* arg_type_name(ArgType t);

}  // namespace kiln
