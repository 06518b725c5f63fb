// The CUDA emulator's stand-in for the toolkit's cuda_runtime.h (see cuda_runtime_api.h).
#pragma once

#include "cuda_runtime_api.h"
