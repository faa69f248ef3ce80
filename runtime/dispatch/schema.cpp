// Parser for PyTorch-style schema strings.

#include "kiln/schema.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace kiln {
namespace {

class SchemaParser {
 public:
  SchemaParser(std::string_view text, std::string_view default_ns)
      : text_(text), default_ns_(default_ns) {}

  FunctionSchema parse() {
    FunctionSchema s;
    std::string qualified = identifier_path();
    size_t colons = qualified.find("::");
    if (colons != std::string::npos) {
      s.ns = qualified.substr(0, colons);
      qualified = qualified.substr(colons + 2);
    } else {
      s.ns = std::string(default_ns_);
    }
    size_t dot = qualified.find('.');
    s.name = qualified.substr(0, dot);
    if (dot != std::string::npos) s.overload = qualified.substr(dot + 1);
    if (s.name.empty()) fail("an op name");
    expect('(');
    bool kwarg_only = false;
    skip_space();
    if (peek() != ')') {
      while (true) {
        skip_space();
        if (peek() == '*') {
          ++pos_;
          kwarg_only = true;
        } else {
          Argument a = argument(/*is_return=*/false);
          a.kwarg_only = kwarg_only;
          s.arguments.push_back(std::move(a));
        }
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        break;
      }
    }
    expect(')');
    skip_space();
    expect('-');
    expect('>');
    skip_space();
    if (peek() == '(') {
      ++pos_;
      skip_space();
      if (peek() != ')') {
        while (true) {
          s.returns.push_back(argument(/*is_return=*/true));
          skip_space();
          if (peek() == ',') {
            ++pos_;
            continue;
          }
          break;
        }
      }
      expect(')');
    } else {
      s.returns.push_back(argument(/*is_return=*/true));
    }
    skip_space();
    if (pos_ != text_.size()) fail("the end of the schema");
    return s;
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  [[noreturn]] void fail(const char* expected) const {
    KILN_FAIL("[schema] expected ", expected, " at position ", pos_, " of '", text_, "', got '",
              pos_ < text_.size() ? text_.substr(pos_, 12) : std::string_view("end"), "'");
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) {
      char what[4] = {'\'', c, '\'', '\0'};
      fail(what);
    }
    ++pos_;
  }
  std::string identifier() {
    skip_space();
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      ++pos_;
    }
    if (start == pos_) fail("a name");
    return std::string(text_.substr(start, pos_ - start));
  }
  // ns::name.overload
  std::string identifier_path() {
    skip_space();
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' ||
            text_[pos_] == '.' || text_[pos_] == ':')) {
      ++pos_;
    }
    if (start == pos_) fail("an op name");
    return std::string(text_.substr(start, pos_ - start));
  }

  Argument argument(bool is_return) {
    Argument a;
    std::string type = identifier();
    if (type == "Tensor") {
      a.type = ArgType::Tensor;
    } else if (type == "int" || type == "SymInt") {
      a.type = ArgType::Int;
    } else if (type == "float") {
      a.type = ArgType::Float;
    } else if (type == "bool") {
      a.type = ArgType::Bool;
    } else if (type == "Scalar") {
      a.type = ArgType::Scalar;
    } else if (type == "ScalarType") {
      a.type = ArgType::DType;
    } else if (type == "Device") {
      a.type = ArgType::Device;
    } else if (type == "str") {
      a.type = ArgType::Str;
    } else {
      pos_ -= type.size();
      fail("a type (Tensor, int, float, bool, Scalar, ScalarType, Device, str)");
    }
    if (peek() == '(') {  // alias annotation: (a) or (a!)
      ++pos_;
      if (!std::isalpha(static_cast<unsigned char>(peek()))) fail("an alias letter");
      a.alias_set = peek();
      ++pos_;
      if (peek() == '!') {
        a.is_write = true;
        ++pos_;
      }
      expect(')');
    }
    if (peek() == '[') {
      ++pos_;
      if (std::isdigit(static_cast<unsigned char>(peek()))) {
        a.fixed_size = 0;
        while (std::isdigit(static_cast<unsigned char>(peek()))) {
          a.fixed_size = a.fixed_size * 10 + (peek() - '0');
          ++pos_;
        }
      }
      expect(']');
      if (a.type == ArgType::Tensor) {
        a.type = ArgType::TensorList;
      } else if (a.type == ArgType::Int) {
        a.type = ArgType::IntList;
      } else if (a.type == ArgType::Float) {
        a.type = ArgType::FloatList;
      } else {
        fail("a list of Tensor, int or float");
      }
    }
    if (peek() == '?') {
      ++pos_;
      a.optional = true;
    }
    skip_space();
    if (is_return) {
      if (std::isalpha(static_cast<unsigned char>(peek()))) a.name = identifier();
      return a;
    }
    a.name = identifier();
    skip_space();
    if (peek() == '=') {
      ++pos_;
      a.default_value = default_value(a);
    }
    return a;
  }

  // The text of one default: up to the next ',' or ')' outside brackets.
  std::string default_text() {
    skip_space();
    size_t start = pos_;
    int depth = 0;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '[') ++depth;
      if (c == ']') --depth;
      if (depth == 0 && (c == ',' || c == ')')) break;
      ++pos_;
    }
    std::string t(text_.substr(start, pos_ - start));
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
    if (t.empty()) fail("a default value");
    return t;
  }

  static bool parse_number(const std::string& t, double* d, int64_t* i, bool* is_int) {
    if (t == "inf") {
      *d = std::numeric_limits<double>::infinity();
      *is_int = false;
      return true;
    }
    if (t == "-inf") {
      *d = -std::numeric_limits<double>::infinity();
      *is_int = false;
      return true;
    }
    char* end = nullptr;
    if (t.find_first_of(".eE") == std::string::npos) {
      *i = std::strtoll(t.c_str(), &end, 10);
      *is_int = true;
    } else {
      *d = std::strtod(t.c_str(), &end);
      *is_int = false;
    }
    return end && *end == '\0' && !t.empty();
  }

  IValue default_value(const Argument& a) {
    std::string t = default_text();
    if (t == "None") {
      if (!a.optional) fail("a default other than None for a non-optional argument");
      return IValue();
    }
    double d = 0;
    int64_t i = 0;
    bool is_int = false;
    switch (a.type) {
      case ArgType::Bool:
        if (t == "True") return IValue(true);
        if (t == "False") return IValue(false);
        fail("True or False");
      case ArgType::Int:
        if (!parse_number(t, &d, &i, &is_int) || !is_int) fail("an integer default");
        return IValue(i);
      case ArgType::Float:
        if (!parse_number(t, &d, &i, &is_int)) fail("a number default");
        return IValue(is_int ? static_cast<double>(i) : d);
      case ArgType::Scalar:
        if (t == "True") return IValue(Scalar(true));
        if (t == "False") return IValue(Scalar(false));
        if (!parse_number(t, &d, &i, &is_int)) fail("a number default");
        return is_int ? IValue(Scalar(i)) : IValue(Scalar(d));
      case ArgType::Str:
        if (t.size() >= 2 && (t.front() == '"' || t.front() == '\'') && t.back() == t.front()) {
          return IValue(t.substr(1, t.size() - 2));
        }
        fail("a quoted string default");
      case ArgType::DType:
        return IValue(parse_dtype(t));
      case ArgType::IntList: {
        std::vector<int64_t> v;
        if (t.front() != '[') {  // "int[2] stride=1" repeats one value
          if (!parse_number(t, &d, &i, &is_int) || !is_int) fail("an integer list default");
          v.assign(a.fixed_size > 0 ? a.fixed_size : 1, i);
          return IValue(std::move(v));
        }
        std::string inner = t.substr(1, t.size() - 2);
        std::stringstream ss(inner);
        std::string item;
        while (std::getline(ss, item, ',')) {
          size_t b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
          if (b == std::string::npos) continue;
          if (!parse_number(item.substr(b, e - b + 1), &d, &i, &is_int) || !is_int) {
            fail("an integer list default");
          }
          v.push_back(i);
        }
        return IValue(std::move(v));
      }
      default:
        fail("a default this argument type can take");
    }
  }

  std::string_view text_;
  std::string_view default_ns_;
  size_t pos_ = 0;
};

}  // namespace

FunctionSchema parse_schema(std::string_view text, std::string_view default_ns) {
  return SchemaParser(text, default_ns).parse();
}

const char* arg_type_name(ArgType t) {
  switch (t) {
    case ArgType::Tensor:
      return "Tensor";
    case ArgType::TensorList:
      return "Tensor[]";
    case ArgType::Int:
      return "int";
    case ArgType::IntList:
      return "int[]";
    case ArgType::Float:
      return "float";
    case ArgType::FloatList:
      return "float[]";
    case ArgType::Bool:
      return "bool";
    case ArgType::Scalar:
      return "Scalar";
    case ArgType::DType:
      return "ScalarType";
    case ArgType::Device:
      return "Device";
    case ArgType::Str:
      return "str";
  }
  return "?";
}

std::string FunctionSchema::full_name() const {
  std::string n = ns == "kiln" ? name : ns + "::" + name;
  if (!overload.empty()) n += "." + overload;
  return n;
}

namespace {
void write_arg(std::ostream& os, const Argument& a) {
  std::string type = arg_type_name(a.type);
  std::string base = type.substr(0, type.find('['));
  os << base;
  if (a.alias_set) os << '(' << a.alias_set << (a.is_write ? "!" : "") << ')';
  if (type.find('[') != std::string::npos) {
    os << '[';
    if (a.fixed_size >= 0) os << a.fixed_size;
    os << ']';
  }
  if (a.optional) os << '?';
  if (!a.name.empty()) os << ' ' << a.name;
  if (a.default_value) {
    const IValue& v = *a.default_value;
    os << '=';
    if (v.is_none()) {
      os << "None";
    } else if (v.is_bool()) {
      os << (v.to_bool() ? "True" : "False");
    } else if (v.is_string()) {
      os << '"' << v.to_string() << '"';
    } else if (v.is_double()) {
      // PyTorch's spelling: "2." for an integral float, else the shortest exact form.
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v.to_double());
      std::string t = buf;
      if (t.find_first_of(".ein") == std::string::npos) t += '.';
      os << t;
    } else if (v.is_scalar() && v.to_scalar().is_bool()) {
      os << (v.to_scalar().to_bool() ? "True" : "False");
    } else {
      os << v.repr();
    }
  }
}
}  // namespace

std::string FunctionSchema::str() const {
  std::ostringstream os;
  os << full_name() << '(';
  bool kw = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (i) os << ", ";
    if (arguments[i].kwarg_only && !kw) {
      os << "*, ";
      kw = true;
    }
    write_arg(os, arguments[i]);
  }
  os << ") -> ";
  if (returns.size() == 1 && returns[0].name.empty()) {
    write_arg(os, returns[0]);
  } else {
    os << '(';
    for (size_t i = 0; i < returns.size(); ++i) {
      if (i) os << ", ";
      write_arg(os, returns[i]);
    }
    os << ')';
  }
  return os.str();
}

bool FunctionSchema::is_mutable() const {
  for (const Argument& a : arguments) {
    if (a.is_write) return true;
  }
  return false;
}

int FunctionSchema::argument_index(std::string_view n) const {
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].name == n) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace kiln
