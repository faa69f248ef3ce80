// einsum: a composite of views (permute, diagonal, unsqueeze), sum, mul and
// bmm, so that every device and mode has it as those ops are.
//
// Note [einsum]
// The equation is PyTorch 1.13's: subscripts a-z and A-Z, spaces ignored, at
// most one "..." per operand, "->" then the output (implicit: "..." first,
// then the subscripts seen once, A-Z before a-z). Each operand is first
// brought to one common layout: the ellipsis dims (right-aligned, as
// broadcasting aligns them), then one dim per subscript of the equation in
// that same order, size 1 where the operand lacks it; a subscript repeated
// within an operand takes its diagonal. A dim of size 1 broadcasts against
// the others, as in PyTorch. Operands are then combined left to right; a
// subscript that is not in the output is summed as soon as no later operand
// has it: alone in one operand by sum, shared by both by one bmm whose batch
// dims are the ones both keep. All operands must have one dtype (PyTorch's
// products refuse a mix), and the result has it, except that a lone operand
// whose subscripts are summed away returns sum's dtype (int64 for integers
// and bool), as PyTorch's. With two or more integer operands kiln keeps
// their dtype where PyTorch returns int64 or raises, depending on the path.

#include <algorithm>
#include <array>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::cpu {
namespace {

constexpr int kLabels = 52;    // A-Z, then a-z
constexpr int kEllipsis = -1;  // the "..." entry of an operand's subscripts

int label_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -2;
}
char char_of(int label) {
  return static_cast<char>(label < 26 ? 'A' + label : 'a' + (label - 26));
}

struct Equation {
  std::vector<std::vector<int>> inputs;  // per operand: labels, kEllipsis for "..."
  std::vector<int> output;               // labels, kEllipsis for "..."
};

// Parses one side of "->" into per-operand subscripts; `offset` is where the
// side starts in the equation, for messages.
std::vector<std::vector<int>> parse_terms(std::string_view text, size_t offset, bool output) {
  std::vector<std::vector<int>> terms(1);
  bool ellipsis = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ') continue;
    if (c == ',' && !output) {
      terms.emplace_back();
      ellipsis = false;
      continue;
    }
    if (c == '.') {
      KILN_CHECK(!ellipsis, "[einsum] expected at most one '...' per ",
                 output ? "output" : "operand", ", got a second in ",
                 output ? "the output" : "operand " + std::to_string(terms.size() - 1));
      KILN_CHECK(i + 2 < text.size() && text[i + 1] == '.' && text[i + 2] == '.',
                 "[einsum] expected '...' at index ", offset + i,
                 " of the equation, got a '.' that is not part of one");
      terms.back().push_back(kEllipsis);
      ellipsis = true;
      i += 2;
      continue;
    }
    KILN_CHECK(label_of(c) >= 0, "[einsum] expected subscripts in [a-zA-Z] at index ", offset + i,
               " of the equation, got '", c, "'");
    terms.back().push_back(label_of(c));
  }
  return terms;
}

Equation parse(std::string_view eq, size_t operands) {
  Equation e;
  const size_t arrow = eq.find("->");
  const std::string_view lhs = eq.substr(0, arrow);
  e.inputs = parse_terms(lhs, 0, false);
  KILN_CHECK(e.inputs.size() == operands, "[einsum] expected ", e.inputs.size(),
             " operands for equation '", eq, "', got ", operands);
  std::array<int, kLabels> count{};
  bool any_ellipsis = false;
  for (const auto& term : e.inputs) {
    for (int l : term) {
      if (l == kEllipsis) {
        any_ellipsis = true;
      } else {
        ++count[static_cast<size_t>(l)];
      }
    }
  }
  if (arrow == std::string_view::npos) {
    if (any_ellipsis) e.output.push_back(kEllipsis);
    for (int l = 0; l < kLabels; ++l) {
      if (count[static_cast<size_t>(l)] == 1) e.output.push_back(l);
    }
    return e;
  }
  const std::string_view rhs = eq.substr(arrow + 2);
  std::vector<std::vector<int>> out = parse_terms(rhs, arrow + 2, true);
  e.output = out[0];
  std::array<bool, kLabels> seen{};
  for (int l : e.output) {
    if (l == kEllipsis) continue;
    KILN_CHECK(count[static_cast<size_t>(l)] > 0, "[einsum] expected output subscripts that ",
               "appear in an operand, got '", char_of(l), "', which none has");
    KILN_CHECK(!seen[static_cast<size_t>(l)], "[einsum] expected each output subscript once, ",
               "got '", char_of(l), "' twice");
    seen[static_cast<size_t>(l)] = true;
  }
  return e;
}

// How many of `t`'s dims its '...' covers, after checking its count of dims.
int64_t ellipsis_dims(const std::vector<int>& term, const Tensor& t, size_t k) {
  const bool has_ellipsis = std::find(term.begin(), term.end(), kEllipsis) != term.end();
  const int64_t named = static_cast<int64_t>(term.size()) - (has_ellipsis ? 1 : 0);
  if (has_ellipsis) {
    KILN_CHECK(t.dim() >= named, "[einsum] expected operand ", k, " to have at least ", named,
               " dims (its subscripts besides '...'), got ", t.dim(), " (sizes ", t.sizes(), ")");
  } else {
    KILN_CHECK(t.dim() == named, "[einsum] expected operand ", k, " to have ", named,
               " dims (one per subscript; no '...' given), got ", t.dim(), " (sizes ", t.sizes(),
               ")");
  }
  return has_ellipsis ? t.dim() - named : 0;
}

// Operand `t` in the common layout of `rank` dims: ellipsis dims end at
// `ell`, subscript l sits at ell + position[l]; absent dims have size 1.
Tensor align(Tensor t, const std::vector<int>& term, int64_t ell, int64_t e,
             const std::array<int64_t, kLabels>& position, int64_t rank, size_t k) {
  std::vector<int64_t> target;  // per dim of t, its place in the layout
  std::vector<int> label;       // per dim of t, its subscript (kEllipsis for '...' dims)
  for (int l : term) {
    if (l == kEllipsis) {
      for (int64_t j = 0; j < e; ++j) {
        target.push_back(ell - e + j);
        label.push_back(kEllipsis);
      }
    } else {
      target.push_back(ell + position[static_cast<size_t>(l)]);
      label.push_back(l);
    }
  }
  // A subscript repeated within the operand: its diagonal, which diagonal()
  // puts last.
  for (bool again = true; again;) {
    again = false;
    for (size_t i = 0; i < target.size() && !again; ++i) {
      for (size_t j = i + 1; j < target.size() && !again; ++j) {
        if (target[i] != target[j]) continue;
        const int64_t di = static_cast<int64_t>(i), dj = static_cast<int64_t>(j);
        KILN_CHECK(t.sizes()[di] == t.sizes()[dj], "[einsum] expected the dims of repeated ",
                   "subscript '", char_of(label[i]), "' in operand ", k, " to have one size, got ",
                   t.sizes()[di], " and ", t.sizes()[dj], " (dims ", di, " and ", dj, ")");
        t = t.diagonal(0, di, dj);
        const int64_t moved = target[i];
        const int l = label[i];
        target.erase(target.begin() + static_cast<std::ptrdiff_t>(j));
        target.erase(target.begin() + static_cast<std::ptrdiff_t>(i));
        label.erase(label.begin() + static_cast<std::ptrdiff_t>(j));
        label.erase(label.begin() + static_cast<std::ptrdiff_t>(i));
        target.push_back(moved);
        label.push_back(l);
        again = true;
      }
    }
  }
  std::vector<int64_t> order(target.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return target[static_cast<size_t>(a)] < target[static_cast<size_t>(b)];
  });
  t = t.permute(order);
  std::vector<bool> present(static_cast<size_t>(rank), false);
  for (int64_t p : target) present[static_cast<size_t>(p)] = true;
  for (int64_t p = 0; p < rank; ++p) {
    if (!present[static_cast<size_t>(p)]) t = t.unsqueeze(p);
  }
  return t;
}

// Sums `t` over `dims` keeping them (as size 1); nothing when `dims` is empty
// (an empty list would mean every dim to sum()).
Tensor sum_kept(const Tensor& t, const std::vector<int64_t>& dims, std::optional<DType> dtype) {
  if (dims.empty()) return t;
  return kiln::sum(t, dims, true, dtype);
}

// a and b in the common layout, combined: the product, summed over the dims
// `contract` marks, which stay as size 1.
Tensor sum_product(Tensor a, Tensor b, const std::vector<bool>& contract) {
  const int64_t rank = a.dim();
  std::vector<int64_t> batch, left, right, inner, rest, a_only, b_only;
  bool any = false;
  for (int64_t p = 0; p < rank; ++p) {
    const bool in_a = a.sizes()[p] != 1, in_b = b.sizes()[p] != 1;
    any = any || contract[static_cast<size_t>(p)];
    if (contract[static_cast<size_t>(p)]) {
      if (in_a && in_b) {
        inner.push_back(p);
        continue;
      }
      if (in_a) a_only.push_back(p);
      if (in_b) b_only.push_back(p);
      rest.push_back(p);
    } else if (in_a && in_b) {
      batch.push_back(p);
    } else if (in_a) {
      left.push_back(p);
    } else if (in_b) {
      right.push_back(p);
    } else {
      rest.push_back(p);
    }
  }
  if (!any) return kiln::mul(a, b);
  a = sum_kept(a, a_only, a.dtype());
  b = sum_kept(b, b_only, b.dtype());
  auto size_of = [](const Tensor& t, const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= t.sizes()[d];
    return n;
  };
  const int64_t nb = size_of(a, batch), nm = size_of(a, left), nn = size_of(b, right),
                nk = size_of(a, inner);
  auto concat = [](std::initializer_list<const std::vector<int64_t>*> parts) {
    std::vector<int64_t> out;
    for (const auto* v : parts) out.insert(out.end(), v->begin(), v->end());
    return out;
  };
  // right dims are size 1 in a, left dims size 1 in b: they ride along.
  Tensor a3 = a.permute(concat({&batch, &left, &inner, &right, &rest})).reshape({nb, nm, nk});
  Tensor b3 = b.permute(concat({&batch, &inner, &right, &left, &rest})).reshape({nb, nk, nn});
  Tensor c = kiln::bmm(a3, b3);
  const std::vector<int64_t> order = concat({&batch, &left, &right, &inner, &rest});
  DimVector sizes;
  for (int64_t d : batch) sizes.push_back(a.sizes()[d]);
  for (int64_t d : left) sizes.push_back(a.sizes()[d]);
  for (int64_t d : right) sizes.push_back(b.sizes()[d]);
  for (size_t i = 0; i < inner.size() + rest.size(); ++i) sizes.push_back(1);
  c = c.reshape(sizes);
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = int64_t(i);
  return c.permute(inverse);
}

Tensor einsum(std::string_view equation, TensorList tensors) {
  KILN_CHECK(!tensors.empty(), "[einsum] expected at least one operand, got none");
  for (size_t k = 0; k < tensors.size(); ++k) {
    check_defined(tensors[k], "einsum", "tensors");
    KILN_CHECK(tensors[k].dtype() == tensors[0].dtype(), "[einsum] expected operands of one ",
               "dtype, got ", tensors[0].dtype(), " (operand 0) and ", tensors[k].dtype(),
               " (operand ", k, ")");
  }
  const Equation e = parse(equation, tensors.size());
  const size_t n = tensors.size();

  // The layout: ellipsis dims, then each subscript used, in label order.
  std::vector<int64_t> ell_of(n);
  int64_t ell = 0;
  for (size_t k = 0; k < n; ++k) {
    ell_of[k] = ellipsis_dims(e.inputs[k], tensors[k], k);
    ell = std::max(ell, ell_of[k]);
  }
  std::array<int64_t, kLabels> position{};
  std::array<bool, kLabels> used{};
  for (const auto& term : e.inputs) {
    for (int l : term) {
      if (l != kEllipsis) used[static_cast<size_t>(l)] = true;
    }
  }
  int64_t rank = ell;
  for (int l = 0; l < kLabels; ++l) {
    if (used[static_cast<size_t>(l)]) position[static_cast<size_t>(l)] = rank++ - ell;
  }

  // Sizes must broadcast across operands (1 against anything).
  std::vector<int64_t> size(static_cast<size_t>(rank), 1);
  std::vector<size_t> last(static_cast<size_t>(rank), 0);  // last operand with the dim
  std::vector<Tensor> aligned;
  for (size_t k = 0; k < n; ++k) {
    Tensor t = align(tensors[k], e.inputs[k], ell, ell_of[k], position, rank, k);
    for (int64_t p = 0; p < rank; ++p) {
      const int64_t s = t.sizes()[p];
      int64_t& have = size[static_cast<size_t>(p)];
      if (s != 1 && have != 1 && s != have) {
        if (p < ell) {
          KILN_FAIL("[einsum] expected operands' '...' dims to broadcast, got size ", s,
                    " in operand ", k, " where an earlier operand has ", have, " (dim ", p - ell,
                    " from the right of the '...')");
        }
        int l = 0;
        while (!used[static_cast<size_t>(l)] || ell + position[static_cast<size_t>(l)] != p) ++l;
        KILN_FAIL("[einsum] expected subscript '", char_of(l), "' to have size ", have,
                  " (or 1) as in an earlier operand, got ", s, " in operand ", k);
      }
      if (s != 1) have = s;
    }
    aligned.push_back(t);
  }
  for (size_t k = 0; k < n; ++k) {
    for (int l : e.inputs[k]) {
      if (l == kEllipsis) {
        for (int64_t j = ell - ell_of[k]; j < ell; ++j) last[static_cast<size_t>(j)] = k;
      } else {
        last[static_cast<size_t>(ell + position[static_cast<size_t>(l)])] = k;
      }
    }
  }

  // Output dims in order; the others are summed away.
  std::vector<int64_t> out_dims;
  for (int l : e.output) {
    if (l == kEllipsis) {
      for (int64_t j = 0; j < ell; ++j) out_dims.push_back(j);
    } else {
      out_dims.push_back(ell + position[static_cast<size_t>(l)]);
    }
  }
  std::vector<bool> kept(static_cast<size_t>(rank), false);
  for (int64_t p : out_dims) kept[static_cast<size_t>(p)] = true;
  auto summed_at = [&](size_t k) {
    std::vector<bool> s(static_cast<size_t>(rank), false);
    for (int64_t p = 0; p < rank; ++p) {
      s[static_cast<size_t>(p)] =
          !kept[static_cast<size_t>(p)] && last[static_cast<size_t>(p)] == k;
    }
    return s;
  };
  auto dims_of = [](const std::vector<bool>& mask) {
    std::vector<int64_t> d;
    for (size_t p = 0; p < mask.size(); ++p) {
      if (mask[p]) d.push_back(static_cast<int64_t>(p));
    }
    return d;
  };

  Tensor result = aligned[0];
  if (n == 1) {
    result = sum_kept(result, dims_of(summed_at(0)), std::nullopt);
  } else {
    result = sum_kept(result, dims_of(summed_at(0)), result.dtype());
    for (size_t k = 1; k < n; ++k) result = sum_product(result, aligned[k], summed_at(k));
  }

  // Output order, then the summed (size-1) dims dropped.
  std::vector<int64_t> order = out_dims;
  for (int64_t p = 0; p < rank; ++p) {
    if (!kept[static_cast<size_t>(p)]) order.push_back(p);
  }
  result = result.permute(order);
  for (int64_t d = rank - 1; d >= static_cast<int64_t>(out_dims.size()); --d) {
    result = result.squeeze(d);
  }
  return result;
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("einsum", &einsum);
}

}  // namespace kiln::cpu
