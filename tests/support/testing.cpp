#include "tests/support/testing.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace kiln::testing {

Tolerance default_tolerance(DType t) {
  switch (t) {
    case kFloat16:
      return {1e-3, 1e-5};
    case kBFloat16:
      return {1.6e-2, 1e-5};
    case kFloat32:
      return {1.3e-6, 1e-5};
    case kFloat64:
      return {1e-7, 1e-7};
    default:
      return {0, 0};
  }
}

std::string index_string(int64_t flat, IntArrayRef sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    int64_t s = sizes[d] > 0 ? sizes[d] : 1;
    idx[d] = flat % s;
    flat /= s;
  }
  std::ostringstream os;
  os << IntArrayRef(idx);
  return os.str();
}

std::string compare(const Tensor& actual, const Tensor& expected, Tolerance tol, bool check_dtype) {
  std::ostringstream os;
  if (!actual.defined() || !expected.defined()) {
    if (actual.defined() != expected.defined()) {
      return actual.defined() ? "expected an undefined tensor, got a defined one"
                              : "expected a defined tensor, got an undefined one";
    }
    return "";
  }
  if (!(actual.sizes() == expected.sizes())) {
    os << "sizes differ: expected " << expected.sizes() << ", got " << actual.sizes();
    return os.str();
  }
  if (check_dtype && actual.dtype() != expected.dtype()) {
    os << "dtypes differ: expected " << expected.dtype() << ", got " << actual.dtype();
    return os.str();
  }
  Tensor a = actual.to(Device::cpu()).to(kFloat64).contiguous();
  Tensor e = expected.to(Device::cpu()).to(kFloat64).contiguous();
  const double* pa = a.data_ptr<double>();
  const double* pe = e.data_ptr<double>();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = pa[i], y = pe[i];
    bool ok;
    if (std::isnan(y) || std::isnan(x)) {
      ok = std::isnan(x) && std::isnan(y);
    } else if (std::isinf(y) || std::isinf(x)) {
      ok = x == y;
    } else {
      ok = std::fabs(x - y) <= tol.atol + tol.rtol * std::fabs(y);
    }
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return "";
  os.precision(9);
  os << bad << " of " << a.numel() << " elements differ; first at index "
     << index_string(first, actual.sizes()) << ": expected " << pe[first] << ", got " << pa[first]
     << " (shape " << actual.sizes() << ", dtype " << actual.dtype() << ", rtol " << tol.rtol
     << ", atol " << tol.atol << ")";
  return os.str();
}

Tensor random_tensor(IntArrayRef sizes, DType dtype, const char* layout, uint64_t seed, double low,
                     double high) {
  // Values come from kiln's own generator in float64, then take the layout.
  std::string l = layout;
  DimVector shape(sizes);
  const int64_t nd = static_cast<int64_t>(shape.size());
  manual_seed(seed);
  auto values = [&](IntArrayRef s) {
    Tensor u = rand(s, kFloat64) * (high - low) + low;
    if (is_integral(dtype, false)) u = floor(u);
    if (dtype == kBool) return lt(rand(s, kFloat64), 0.5);
    return u.to(dtype);
  };
  if (l == "contiguous" || nd == 0) return values(shape);
  if (l == "transposed" && nd >= 2) {
    DimVector rev(nd), perm(nd);
    for (int64_t i = 0; i < nd; ++i) {
      rev[i] = shape[nd - 1 - i];
      perm[i] = nd - 1 - i;
    }
    return values(rev).permute(perm);
  }
  if (l == "strided" || l == "transposed") {
    DimVector wide = shape;
    wide[nd - 1] *= 2;
    return values(wide).slice(nd - 1, 0, std::nullopt, 2);
  }
  if (l == "offset") {
    DimVector big = shape;
    for (auto& s : big) s += 1;
    Tensor b = values(big);
    for (int64_t d = 0; d < nd; ++d) b = b.narrow(d, 1, shape[d]);
    return b;
  }
  if (l == "expanded") {
    DimVector one = shape;
    for (int64_t d = 0; d < nd; ++d) {
      if (one[d] > 1) {
        one[d] = 1;
        break;
      }
    }
    return values(one).expand(shape);
  }
  throw Error("random_tensor: unknown layout " + l);
}

namespace {

// This process's own folder under the test temp folder, removed with what the
// tests left in it when the process exits (by the process that made it only:
// a forked child exiting does not take its parent's files).
class TempFolder {
 public:
  TempFolder() : owner_(::getpid()) {
    std::string dir = ::testing::TempDir();
    if (dir.empty() || dir.back() != '/') dir += '/';
    path_ = dir + "kiln_" + std::to_string(owner_);
    std::filesystem::create_directories(path_);
  }
  ~TempFolder() {
    if (::getpid() != owner_) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;

  const std::string& path() const { return path_; }

 private:
  pid_t owner_;
  std::string path_;
};

}  // namespace

Tensor whole_storage(const Tensor& t) {
  const auto n = static_cast<int64_t>(t.impl()->storage()->nbytes() / t.element_size());
  return t.as_strided({n}, {1}, 0);
}

Tensor same_layout_copy(const Tensor& t, Device device) {
  EagerGuard eager;
  Tensor base = whole_storage(t);
  base = base.device() == device ? base.clone() : base.to(device);
  return base.as_strided(t.sizes(), t.strides(), t.storage_offset());
}

std::string temp_path(const std::string& name) {
  static TempFolder folder;
  return folder.path() + "/" + name;
}

ChildRun run_test_in_child(const std::string& filter, const std::vector<std::string>& env,
                           std::chrono::seconds timeout) {
  static int runs = 0;
  const std::string exe = "/proc/self/exe";
  const std::string filter_arg = "--gtest_filter=" + filter;
  const std::string log = temp_path("child_" + std::to_string(++runs) + ".log");
  std::vector<std::string> env_strings(env);
  // The child runs its one test whatever shard of the suite this process is.
  for (char** e = environ; *e; ++e) {
    const std::string var = *e;
    if (var.rfind("GTEST_SHARD_INDEX=", 0) == 0 || var.rfind("GTEST_TOTAL_SHARDS=", 0) == 0) {
      continue;
    }
    env_strings.push_back(var);
  }
  std::vector<char*> envp;
  for (std::string& v : env_strings) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::vector<char*> argv{const_cast<char*>(exe.c_str()), const_cast<char*>(filter_arg.c_str()),
                          nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return {"posix_spawn failed: " + std::to_string(rc), ""};
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    done = waitpid(pid, &status, WNOHANG) == pid;
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ChildRun r;
  std::ifstream f(log);
  std::stringstream out;
  out << f.rdbuf();
  r.output = out.str();
  if (!done) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    r.error = "the child hung (killed after " + std::to_string(timeout.count()) + " s)";
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    r.error = "the child failed (status " + std::to_string(status) + ")";
  }
  return r;
}

}  // namespace kiln::testing
