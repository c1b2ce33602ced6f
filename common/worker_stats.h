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

// Every field once: its type, its name (the WorkerStats member and the v1::WorkerReport
// field), its metric, whether the metric is a counter, and its help. Adding a field: the
// proto field and one row here.
// X(type, field, "metric", counter, "help")
#define MULOCO_WORKER_STATS(X)                                                                                      \
  X(uint64_t, round, "muloco_worker_round", false, "Round of the worker's public model")                           \
  X(uint64_t, rounds_done, "muloco_worker_rounds_total", true, "Rounds this worker contributed to and saw close")    \
  X(uint64_t, bytes_up, "muloco_worker_uplink_bytes_total", true, "Payload bytes pushed in accepted rounds")         \
  X(uint64_t, bytes_down, "muloco_worker_downlink_bytes_total", true, "Round update payload bytes received")         \
  X(uint64_t, model_fetches, "muloco_worker_model_fetches_total", true,                                              \
    "Full model fetches (resyncs, and the first sync unless built from the seed)")                                  \
  X(uint64_t, tokens, "muloco_worker_tokens_total", true, "Training tokens processed")                              \
  X(double, train_loss, "muloco_worker_train_loss", false, "Mean training loss of the last round")                  \
  X(double, val_loss, "muloco_worker_val_loss", false, "Validation loss at the last evaluation")                    \
  X(double, ef_residual_norm, "muloco_worker_ef_residual_norm", false,                                              \
    "L2 norm of the error-feedback buffer after the last push")                                                     \
  X(double, inner_step_seconds, "muloco_worker_inner_step_seconds", false,                                          \
    "Mean seconds per inner step in the last round")                                                                \
  X(double, tokens_per_second, "muloco_worker_tokens_per_second", false, "Training tokens per second in the last round") \
  X(double, wait_seconds, "muloco_worker_wait_seconds", false,                                                      \
    "Seconds the last round waited for the server (push, aggregation, downlink)")

struct WorkerStats {
#define MULOCO_MEMBER(type, field, metric, counter, help) type field = 0;
  MULOCO_WORKER_STATS(MULOCO_MEMBER)
#undef MULOCO_MEMBER
};

// `worker`: empty on the worker's own endpoint; its name where the server re-exports it.
std::vector<MetricSample> WorkerMetrics(const WorkerStats& s, const std::string& worker = "");

v1::WorkerReport ToReport(const WorkerStats& s);
// Peer input: non-finite or negative values become 0.
WorkerStats FromReport(const v1::WorkerReport& r);

}  // namespace muloco
