// A thread-safe histogram of observed values (durations in seconds, mostly), read as a
// snapshot by the metrics endpoint (common/metrics.h). Plain C++: code that observes does
// not depend on Prometheus.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace muloco {

struct HistogramData {
  std::vector<double> bounds;        // upper bounds, ascending (+Inf implied after the last)
  std::vector<uint64_t> cumulative;  // observations <= bounds[i]
  double sum = 0;
  uint64_t count = 0;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  HistogramData Snapshot() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, not cumulative
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// 1 ms to about 17 min, doubling: rounds, calls and inner steps all fit.
std::vector<double> DurationBuckets();

}  // namespace muloco
