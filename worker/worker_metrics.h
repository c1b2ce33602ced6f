// A worker's counters, and their Prometheus metrics (names, help, values) for a scrape.
#pragma once

#include <cstdint>
#include <vector>

#include "common/metrics.h"

namespace muloco {

struct WorkerStats {
  uint64_t round = 0;                        // the public model's round
  uint64_t rounds_done = 0;                  // rounds this worker pushed to and saw close
  uint64_t bytes_up = 0, bytes_down = 0;     // payload bytes pushed, and received in round updates
  uint64_t model_fetches = 0;                // full model fetches (first sync and every resync)
  uint64_t tokens = 0;                       // training tokens processed
  double train_loss = 0, val_loss = 0;       // the last round's mean training loss; the last evaluation
};

std::vector<MetricSample> WorkerMetrics(const WorkerStats& s);

}  // namespace muloco
