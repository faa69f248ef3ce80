// kiln-bench: the reference workloads (see README). Grows with the runtime.
#include <cstdio>

#include "kiln/kiln.h"

int main() {
  std::printf("%s", kiln::build_info().c_str());
  return 0;
}
