// MulocoVersion (see version.h); MULOCO_VERSION comes from CMake.
#include "common/version.h"

#ifndef MULOCO_VERSION
#define MULOCO_VERSION "unknown"
#endif

namespace muloco {

const char* MulocoVersion() { return MULOCO_VERSION; }

}  // namespace muloco
