#pragma once

#include <string>

#include "kiln/api.h"

namespace kiln {

// One line per fact: version, compiler, CPU ISA in use, CUDA availability, devices.
KILN_API std::string build_info();
// "avx512", "avx2" or "scalar": what generated CPU code targets on this machine.
KILN_API const char* cpu_isa();

}  // namespace kiln
