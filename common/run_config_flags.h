// Command-line flags for every RunConfig field, shared by muloco-server (which hands the
// config to workers) and muloco-worker --baseline (which trains alone). Only main() calls it.
#pragma once

#include "muloco/v1/muloco.pb.h"

namespace muloco {

v1::RunConfig RunConfigFromFlags();

}  // namespace muloco
