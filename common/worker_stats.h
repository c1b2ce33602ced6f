// A worker's counters: what its own /metrics serves, what each heartbeat reports to the
// server (v1::WorkerReport), and what the server re-exports with a `worker` label, so that
// workers behind NAT, which nobody can scrape, are still seen. The metric names live here
// only, for both endpoints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "muloco/v1/muloco.pb.h"

namespace muloco {

struct WorkerStats {
  uint64_t round = 0;                        // the public model's round
  uint64_t rounds_done = 0;                  // rounds this worker pushed to and saw close
  uint64_t bytes_up = 0, bytes_down = 0;     // payload bytes pushed, and received in round updates
  uint64_t model_fetches = 0;                // full model fetches (every resync; the first sync unless built from the seed)
  uint64_t tokens = 0;                       // training tokens processed
  double train_loss = 0, val_loss = 0;       // the last round's mean training loss; the last evaluation
  double ef_residual_norm = 0;               // L2 norm of the error-feedback buffer after the last push
  double inner_step_seconds = 0;             // mean wall time of one inner step, last round
  double tokens_per_second = 0;              // training throughput, last round
  double wait_seconds = 0;                   // last round: seconds training waited for the server (push, aggregation, downlink)
};

// `worker`: empty on the worker's own endpoint; its name where the server re-exports it.
std::vector<MetricSample> WorkerMetrics(const WorkerStats& s, const std::string& worker = "");

v1::WorkerReport ToReport(const WorkerStats& s);
// Peer input: non-finite or negative values become 0.
WorkerStats FromReport(const v1::WorkerReport& r);

}  // namespace muloco
