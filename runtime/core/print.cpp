// Tensor::str() and operator<<: PyTorch 1.13's repr, character for character
// (its default print options: precision 4, summarization past 1000 elements
// with 3 edge items per dim, lines of 80 columns).
//
// Note [Printing as PyTorch]
// One formatter serves the whole tensor (for a summarized tensor, the edge
// items only). Floating tensors print in one of three modes, chosen from the
// nonzero finite values: every value an integer -> "3." (scientific when
// max / min > 1000 or max > 1e8); otherwise "%.4f", or "%.4e" when
// max / min > 1000, max > 1e8 or min < 1e-4. Each element is right-aligned to
// the widest of those values' texts (nan and inf do not count). Float16 and
// bfloat16 print their float values; every value is formatted as a double.
// Integer and bool elements align to their widest text.

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/tensor.h"
#include "runtime/core/tensor_utils.h"

namespace kiln {
namespace {

constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

std::string printf_double(const char* fmt, double v) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// Reads elements in place: offsets are in elements from element 0, through
// the tensor's own strides, so a summarized print touches only what it shows.
struct Values {
  DType dtype;
  const void* base;
  IntArrayRef sizes;
  IntArrayRef strides;
  double floating(int64_t off) const { return load_as_double(base, dtype, off); }
  int64_t integer(int64_t off) const { return load_scalar(base, dtype, off).to_int(); }
};

class Formatter {
 public:
  // `shown`: offsets of the elements that will be printed.
  Formatter(const Values& v, const std::vector<int64_t>& shown) : v_(v) {
    if (!is_floating(v.dtype)) {
      for (int64_t off : shown) width_ = std::max(width_, text(off).size());
      return;
    }
    bool any = false;
    double lo = 0, hi = 0;
    for (int64_t off : shown) {
      const double x = v.floating(off);
      if (!std::isfinite(x) || x == 0) continue;
      lo = any ? std::min(lo, std::fabs(x)) : std::fabs(x);
      hi = any ? std::max(hi, std::fabs(x)) : std::fabs(x);
      any = true;
      if (x != std::ceil(x)) int_mode_ = false;
    }
    if (!any) return;
    sci_ = hi / lo > 1000.0 || hi > 1.0e8 || (!int_mode_ && lo < 1.0e-4);
    for (int64_t off : shown) {
      const double x = v.floating(off);
      if (!std::isfinite(x) || x == 0) continue;
      // In int mode the width counts the "." after the digits.
      width_ = std::max(width_, text(off).size());
    }
  }

  size_t width() const { return width_; }

  // The element's text, right-aligned to the common width.
  std::string format(int64_t off) const {
    std::string s = text(off);
    return s.size() < width_ ? std::string(width_ - s.size(), ' ') + s : s;
  }

 private:
  std::string text(int64_t off) const {
    if (v_.dtype == kBool) return v_.integer(off) ? "True" : "False";
    if (!is_floating(v_.dtype)) return std::to_string(v_.integer(off));
    const double x = v_.floating(off);
    // Python's spellings: no "-nan"; int mode puts no "." after nan and inf.
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    if (sci_) return printf_double("%.4e", x);
    if (int_mode_) return printf_double("%.0f", x) + ".";
    return printf_double("%.4f", x);
  }

  const Values& v_;
  bool int_mode_ = true;
  bool sci_ = false;
  size_t width_ = 1;
};

// Offsets of the elements a (summarized) print shows, in order.
void collect(const Values& v, size_t dim, int64_t offset, bool summarize,
             std::vector<int64_t>* out) {
  if (dim == v.sizes.size()) {
    out->push_back(offset);
    return;
  }
  const int64_t n = v.sizes[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    collect(v, dim + 1, offset + i * v.strides[dim], summarize, out);
  }
}

class Printer {
 public:
  Printer(const Values& v, bool summarize, const Formatter& f)
      : v_(v), summarize_(summarize), f_(f) {}

  std::string tensor(size_t dim, int64_t offset, int64_t indent) const {
    const size_t nd = v_.sizes.size();
    if (nd == 0) return f_.format(offset);
    if (dim + 1 == nd) return vector(offset, indent);
    const int64_t n = v_.sizes[dim];
    std::vector<std::string> parts;
    for (int64_t i = 0; i < n; ++i) {
      if (summarize_ && n > 2 * kEdgeItems && i == kEdgeItems) {
        parts.push_back("...");
        i = n - kEdgeItems;
      }
      parts.push_back(tensor(dim + 1, offset + i * v_.strides[dim], indent + 1));
    }
    // Sub-tensors are separated by one blank line less than their rank.
    std::string sep = ",";
    sep.append(nd - dim - 1, '\n');
    sep.append(static_cast<size_t>(indent + 1), ' ');
    std::string s = "[";
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i > 0) s += sep;
      s += parts[i];
    }
    s += ']';
    return s;
  }

 private:
  std::string vector(int64_t offset, int64_t indent) const {
    const size_t dim = v_.sizes.size() - 1;
    const int64_t n = v_.sizes[dim];
    const int64_t element_length = static_cast<int64_t>(f_.width()) + 2;
    const size_t per_line =
        static_cast<size_t>(std::max<int64_t>(1, (kLineWidth - indent) / element_length));
    std::vector<std::string> items;
    for (int64_t i = 0; i < n; ++i) {
      if (summarize_ && n > 2 * kEdgeItems && i == kEdgeItems) {
        items.push_back(" ...");
        i = n - kEdgeItems;
      }
      items.push_back(f_.format(offset + i * v_.strides[dim]));
    }
    const std::string line_sep = ",\n" + std::string(static_cast<size_t>(indent + 1), ' ');
    std::string s = "[";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) s += i % per_line == 0 ? line_sep : ", ";
      s += items[i];
    }
    return s + "]";
  }

  const Values& v_;
  bool summarize_;
  const Formatter& f_;
};

// Python's str() of a tuple of ints: "(2, 3)", "(5,)", "()".
std::string tuple_str(IntArrayRef sizes) {
  std::string s = "(";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + (sizes.size() == 1 ? ",)" : ")");
}

std::string dtype_str(DType t) {
  return std::string("torch.") + dtype_name(t);
}

std::string values_str(const Tensor& self, int64_t indent) {
  const Tensor c = self.is_cpu() ? self : self.to(Device::cpu());
  // data_ptr() computes a pending value first.
  const Values v{c.dtype(), c.data_ptr(), c.sizes(), c.strides()};
  const bool summarize = c.numel() > kThreshold;
  std::vector<int64_t> shown;
  collect(v, 0, 0, summarize, &shown);
  const Formatter f(v, shown);
  return Printer(v, summarize, f).tensor(0, 0, indent);
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const std::string prefix = "tensor(";
  const int64_t indent = static_cast<int64_t>(prefix.size());
  std::vector<std::string> suffixes;
  if (!device().is_cpu()) suffixes.push_back("device='" + device().str() + "'");
  std::string body;
  if (is_meta()) {
    suffixes.push_back("size=" + tuple_str(sizes()));
    if (dtype() != kFloat32) suffixes.push_back("dtype=" + dtype_str(dtype()));
    body = "...";
  } else if (numel() == 0) {
    // The shape is shown unless it is (0,); the dtype unless it is the default.
    if (dim() != 1) suffixes.push_back("size=" + tuple_str(sizes()));
    if (dtype() != kFloat32) suffixes.push_back("dtype=" + dtype_str(dtype()));
    body = "[]";
  } else {
    if (dtype() != kFloat32 && dtype() != kInt64 && dtype() != kBool) {
      suffixes.push_back("dtype=" + dtype_str(dtype()));
    }
    body = values_str(*this, indent);
  }
  std::string s = prefix + body;
  // Suffixes join the last line while it stays within the line width. As
  // PyTorch counts it, a line's length here is two more than its characters.
  const size_t nl = s.rfind('\n');
  int64_t last_line = static_cast<int64_t>(s.size()) -
                      (nl == std::string::npos ? -1 : static_cast<int64_t>(nl)) + 1;
  for (const std::string& suffix : suffixes) {
    const int64_t len = static_cast<int64_t>(suffix.size());
    if (last_line + len + 2 > kLineWidth) {
      s += ",\n" + std::string(static_cast<size_t>(indent), ' ') + suffix;
      last_line = indent + len;
    } else {
      s += ", " + suffix;
      last_line += len + 2;
    }
  }
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

}  // namespace kiln
