/* cuda_runtime.h (CPU emulator): the runtime API shim; see cuda_runtime_api.h. */
#include "cuda_runtime_api.h"
