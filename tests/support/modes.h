#pragma once

// Runs one check in each execution mode a must-fail case must hold in.

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln::testing {

// `body(device)` eager on the CPU, lazily on the CPU (then kiln::sync(), so
// what it recorded runs), and on the meta device, each under a SCOPED_TRACE.
template <class F>
void in_eager_lazy_and_meta(F body) {
  {
    SCOPED_TRACE("eager");
    EagerGuard eager;
    body(Device::cpu());
  }
  {
    SCOPED_TRACE("lazy");
    body(Device::cpu());
    sync();
  }
  {
    SCOPED_TRACE("meta");
    body(Device::meta());
  }
}

}  // namespace kiln::testing
