#pragma once

#include <string>

#include "kiln/api.h"
#include "kiln/device.h"

namespace kiln::cuda {

// False without a toolkit at build time, a driver, or a device at run time;
// kiln then runs on the CPU alone.
KILN_API bool is_available();
KILN_API int device_count();
// "NVIDIA H100 80GB HBM3 (sm_90)"; throws when the device does not exist.
KILN_API std::string device_name(int index = 0);
// Waits for all work queued on the current stream of `device`.
KILN_API void synchronize(Device device = Device::cuda());

}  // namespace kiln::cuda
