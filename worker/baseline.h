// The single-process baseline (muloco-worker --baseline): the same model, data and inner
// optimizer as a worker, trained for rounds × inner steps with no server and no compression.
// The reference every distributed run is compared against.
#pragma once

#include "muloco/v1/muloco.pb.h"
#include "worker/worker_options.h"

namespace muloco {

// Uses options.data, val_data and save_final. Returns a process exit code.
int RunBaseline(const v1::RunConfig& config, const WorkerOptions& options);

}  // namespace muloco
