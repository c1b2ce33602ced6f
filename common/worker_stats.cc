// WorkerMetrics and the report conversions (see worker_stats.h).
#include "common/worker_stats.h"

#include <cmath>

namespace muloco {

std::vector<MetricSample> WorkerMetrics(const WorkerStats& s, const std::string& worker) {
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  std::vector<MetricSample> out = {
      {"muloco_worker_round", "Round of the worker's public model", false, d(s.round)},
      {"muloco_worker_rounds_total", "Rounds this worker contributed to and saw close", true, d(s.rounds_done)},
      {"muloco_worker_uplink_bytes_total", "Payload bytes pushed in accepted rounds", true, d(s.bytes_up)},
      {"muloco_worker_downlink_bytes_total", "Round update payload bytes received", true, d(s.bytes_down)},
      {"muloco_worker_model_fetches_total", "Full model fetches (resyncs, and the first sync unless built from the seed)", true, d(s.model_fetches)},
      {"muloco_worker_tokens_total", "Training tokens processed", true, d(s.tokens)},
      {"muloco_worker_train_loss", "Mean training loss of the last round", false, s.train_loss},
      {"muloco_worker_val_loss", "Validation loss at the last evaluation", false, s.val_loss},
      {"muloco_worker_ef_residual_norm", "L2 norm of the error-feedback buffer after the last push", false,
       s.ef_residual_norm},
      {"muloco_worker_inner_step_seconds", "Mean seconds per inner step in the last round", false,
       s.inner_step_seconds},
      {"muloco_worker_tokens_per_second", "Training tokens per second in the last round", false, s.tokens_per_second},
      {"muloco_worker_wait_seconds", "Seconds the last round waited for the server (push, aggregation, downlink)", false,
       s.wait_seconds},
  };
  if (!worker.empty()) {
    for (MetricSample& m : out) m.labels.push_back({"worker", worker});
  }
  return out;
}

v1::WorkerReport ToReport(const WorkerStats& s) {
  v1::WorkerReport r;
  r.set_round(s.round);
  r.set_rounds_done(s.rounds_done);
  r.set_bytes_up(s.bytes_up);
  r.set_bytes_down(s.bytes_down);
  r.set_model_fetches(s.model_fetches);
  r.set_tokens(s.tokens);
  r.set_train_loss(s.train_loss);
  r.set_val_loss(s.val_loss);
  r.set_ef_residual_norm(s.ef_residual_norm);
  r.set_inner_step_seconds(s.inner_step_seconds);
  r.set_tokens_per_second(s.tokens_per_second);
  r.set_wait_seconds(s.wait_seconds);
  return r;
}

WorkerStats FromReport(const v1::WorkerReport& r) {
  auto sane = [](double v) { return std::isfinite(v) && v >= 0 ? v : 0.0; };
  WorkerStats s;
  s.round = r.round();
  s.rounds_done = r.rounds_done();
  s.bytes_up = r.bytes_up();
  s.bytes_down = r.bytes_down();
  s.model_fetches = r.model_fetches();
  s.tokens = r.tokens();
  s.train_loss = sane(r.train_loss());
  s.val_loss = sane(r.val_loss());
  s.ef_residual_norm = sane(r.ef_residual_norm());
  s.inner_step_seconds = sane(r.inner_step_seconds());
  s.tokens_per_second = sane(r.tokens_per_second());
  s.wait_seconds = sane(r.wait_seconds());
  return s;
}

}  // namespace muloco
