// WorkerMetrics and the report conversions (see worker_stats.h), from the one table.
#include "common/worker_stats.h"

#include <cmath>

namespace muloco {
namespace {

// Peer input: counters as sent; a non-finite or negative gauge becomes 0.
uint64_t Sane(uint64_t v) { return v; }
double Sane(double v) { return std::isfinite(v) && v >= 0 ? v : 0.0; }

}  // namespace

std::vector<MetricSample> WorkerMetrics(const WorkerStats& s, const std::string& worker) {
  std::vector<MetricSample> out = {
#define MULOCO_METRIC(type, field, metric, counter, help) {metric, help, counter, static_cast<double>(s.field)},
      MULOCO_WORKER_STATS(MULOCO_METRIC)
#undef MULOCO_METRIC
  };
  if (!worker.empty()) {
    for (MetricSample& m : out) m.labels.push_back({"worker", worker});
  }
  return out;
}

v1::WorkerReport ToReport(const WorkerStats& s) {
  v1::WorkerReport r;
#define MULOCO_TO(type, field, metric, counter, help) r.set_##field(s.field);
  MULOCO_WORKER_STATS(MULOCO_TO)
#undef MULOCO_TO
  return r;
}

WorkerStats FromReport(const v1::WorkerReport& r) {
  WorkerStats s;
#define MULOCO_FROM(type, field, metric, counter, help) s.field = Sane(r.field());
  MULOCO_WORKER_STATS(MULOCO_FROM)
#undef MULOCO_FROM
  return s;
}

}  // namespace muloco
