// WorkerMetrics (see worker_metrics.h).
#include "worker/worker_metrics.h"

namespace muloco {

std::vector<MetricSample> WorkerMetrics(const WorkerStats& s) {
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  return {
      {"muloco_worker_round", "Round of the worker's public model", false, d(s.round)},
      {"muloco_worker_rounds_total", "Rounds this worker contributed to and saw close", true, d(s.rounds_done)},
      {"muloco_worker_uplink_bytes_total", "Payload bytes pushed in accepted rounds", true, d(s.bytes_up)},
      {"muloco_worker_downlink_bytes_total", "Round update payload bytes received", true, d(s.bytes_down)},
      {"muloco_worker_model_fetches_total", "Full model fetches (first sync and resyncs)", true, d(s.model_fetches)},
      {"muloco_worker_tokens_total", "Training tokens processed", true, d(s.tokens)},
      {"muloco_worker_train_loss", "Mean training loss of the last round", false, s.train_loss},
      {"muloco_worker_val_loss", "Validation loss at the last evaluation", false, s.val_loss},
  };
}

}  // namespace muloco
