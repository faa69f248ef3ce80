#pragma once

// Everything a program needs from kiln.

#include "kiln/api.h"
#include "kiln/autocast.h"
#include "kiln/cuda.h"
#include "kiln/dispatch.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/info.h"
#include "kiln/jit.h"
#include "kiln/logging.h"
#include "kiln/nn.h"
#include "kiln/ops.h"
#include "kiln/tensor.h"
