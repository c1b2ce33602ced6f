// Evaluation outside the training (muloco-worker --evaluate): the validation loss of saved
// models (raw fp32, from --save_final or --defer_eval, which also writes the run's
// configuration beside them) on the same fixed validation windows as a worker's own
// evaluations, so that the numbers compare.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "muloco/v1/muloco.pb.h"
#include "worker/worker_options.h"

namespace muloco {

// Where --defer_eval writes the public model of round `round` (names sort in round order).
std::string DeferredEvalPath(const std::string& dir, uint64_t round);
// The round-*.bin files in `dir`, in round order (none when it is missing).
std::vector<std::string> DeferredModels(const std::string& dir);
// Where --defer_eval writes the run's configuration (the --config format) beside the models.
std::string DeferredConfigPath(const std::string& dir);
// The run configuration written beside the models `paths` name (in a directory named, or in a
// named file's directory): "" when there is none; an error when two differ.
absl::StatusOr<std::string> ConfigBeside(const std::vector<std::string>& paths);

// Evaluates each of `paths` (a file, or a directory: its *.bin files in name order) as a model
// of `config`, printing "PATH val_loss X" to stdout per model. Uses options.data, val_data and
// device. A path that is not such a model is reported on stderr and the rest still evaluated.
// Returns a process exit code: 0; 1 when any path failed; 2 when config has no validation
// batches (--eval_batches=0).
int RunEvaluate(const v1::RunConfig& config, const WorkerOptions& options, const std::vector<std::string>& paths);

}  // namespace muloco
