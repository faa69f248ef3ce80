#include "runtime/core/deferred_checks.h"

namespace kiln::detail {
namespace {

thread_local DeferredChecks* t_current = nullptr;

}  // namespace

DeferredChecks::DeferredChecks() : saved_(t_current) {
  t_current = this;
}

DeferredChecks::~DeferredChecks() {
  t_current = saved_;
  // Unfinished checks (the run raised) release their slots as they go.
}

DeferredChecks* DeferredChecks::current() {
  return t_current;
}

void DeferredChecks::add(std::unique_ptr<PendingCheck> check) {
  pending_.emplace_back(step_, std::move(check));
}

std::vector<std::pair<size_t, std::exception_ptr>> DeferredChecks::finish() {
  std::vector<std::pair<size_t, std::exception_ptr>> raised;
  std::vector<std::pair<size_t, std::unique_ptr<PendingCheck>>> pending = std::move(pending_);
  pending_.clear();
  for (auto& [step, check] : pending) {
    try {
      check->run();
    } catch (...) {
      raised.emplace_back(step, std::current_exception());
    }
  }
  return raised;
}

}  // namespace kiln::detail
