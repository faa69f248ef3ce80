#include "jit/compile/explain.h"

#include <ostream>
#include <sstream>

#include "jit/ir/reduction_ir.h"

namespace kiln::jit {
namespace {

// The decimal number starting at `at` (its end in *end), or -1 when none.
int64_t number_at(const std::string& s, size_t at, size_t* end) {
  int64_t n = -1;
  size_t i = at;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9' && i - at < 18; ++i) {
    n = (n < 0 ? 0 : n * 10) + (s[i] - '0');
  }
  *end = i;
  return n;
}

std::string sizes_str(const DimVector& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

std::string members_str(const Plan& plan, const std::vector<size_t>& members) {
  std::string s;
  for (size_t m : members) s += (s.empty() ? "" : ", ") + plan.nodes[m].op->name();
  return s;
}

}  // namespace

ExplainPlan explain_plan(const Instance& inst, const std::vector<int64_t>& sizes,
                         const std::string& specialized_for) {
  const Plan& plan = inst.plan();
  ExplainPlan p;
  p.sizes = sizes;
  p.specialized_for = specialized_for;
  p.steps = static_cast<int64_t>(plan.steps.size());
  p.arena_bytes = static_cast<int64_t>(plan.memory.planned_bytes);
  p.graph_nodes = static_cast<int64_t>(inst.graph_nodes());
  p.early_launches = static_cast<int64_t>(inst.graph_early_edges());
  for (const Step& step : plan.steps) {
    switch (step.kind) {
      case Step::Kind::Extern: {
        const std::string op = plan.nodes[step.node].op->name();
        p.externs.push_back(op);
        p.kernels.push_back("extern: " + op);
        ++p.extern_calls;
        break;
      }
      case Step::Kind::Fused:
        p.kernels.push_back("fused kernel: " + members_str(plan, step.group.members) + " over " +
                            sizes_str(step.group.shape));
        ++p.generated_kernels;
        break;
      case Step::Kind::Reduction:
        p.kernels.push_back(std::string("reduction kernel (") + row_op_name(step.reduction.op) +
                            "): " + members_str(plan, step.reduction.members) + " over " +
                            sizes_str(step.reduction.in_shape));
        ++p.generated_kernels;
        break;
    }
  }
  return p;
}

GraphBreak describe_break(int entry, const std::string& reason) {
  GraphBreak b;
  b.entry = entry;
  b.reason = reason;
  // The reason reads "... op N 'name' ..." and "... after N recorded ops ...".
  for (size_t at = reason.find("op "); at != std::string::npos; at = reason.find("op ", at + 1)) {
    size_t end = 0;
    const int64_t n = number_at(reason, at + 3, &end);
    if (n < 0 || reason.compare(end, 2, " '") != 0) continue;
    const size_t close = reason.find('\'', end + 2);
    if (close == std::string::npos) continue;
    b.op_index = n;
    b.op = reason.substr(end + 2, close - end - 2);
    break;
  }
  const size_t after = reason.find("after ");
  if (after != std::string::npos) {
    size_t end = 0;
    const int64_t n = number_at(reason, after + 6, &end);
    if (n >= 0 && reason.compare(end, 13, " recorded ops") == 0) b.after_ops = n;
  }
  return b;
}

std::string Explanation::str() const {
  std::ostringstream os;
  os << "compiled function '" << name << "': " << entries.size() << " entr"
     << (entries.size() == 1 ? "y" : "ies") << ", " << stats.calls << " calls (" << stats.hits
     << " hits, " << stats.uncompiled_calls << " uncompiled), " << graph_breaks.size()
     << " graph break" << (graph_breaks.size() == 1 ? "" : "s") << "\n";
  for (const ExplainEntry& e : entries) {
    os << "entry " << e.index << " (" << e.reason
       << "): " << (e.compiled ? "compiled" : "uncompiled: " + e.uncompiled) << "\n";
    os << "  guards:\n";
    for (const std::string& g : e.guards) os << "    " << g << "\n";
    for (size_t k = 0; k < e.plans.size(); ++k) {
      const ExplainPlan& p = e.plans[k];
      os << "  plan " << k + 1;
      if (!p.specialized_for.empty()) os << " (for " << p.specialized_for << ")";
      os << ": " << p.steps << " steps (" << p.generated_kernels << " generated kernels, "
         << p.extern_calls << " extern calls), arena " << p.arena_bytes << " bytes, "
         << (p.graph_nodes ? "CUDA graph of " + std::to_string(p.graph_nodes) + " nodes, " +
                                 std::to_string(p.early_launches) + " launched early"
                           : std::string("no CUDA graph"))
         << "\n";
      for (size_t s = 0; s < p.kernels.size(); ++s) {
        os << "    " << s + 1 << ". " << p.kernels[s] << "\n";
      }
    }
  }
  if (!graph_breaks.empty()) os << "graph breaks:\n";
  for (const GraphBreak& b : graph_breaks) {
    os << "  entry " << b.entry << ": ";
    if (b.op_index >= 0) os << "at op " << b.op_index << " '" << b.op << "', ";
    if (b.after_ops >= 0) os << "after " << b.after_ops << " recorded ops: ";
    os << b.reason << "\n";
  }
  if (!recompiles.empty()) os << "recompiles:\n";
  for (const Recompile& r : recompiles) {
    os << "  " << (r.entry > 0 ? "entry " + std::to_string(r.entry) : std::string("cache")) << ": "
       << r.reason << "\n";
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Explanation& e) {
  return os << e.str();
}

}  // namespace kiln::jit
