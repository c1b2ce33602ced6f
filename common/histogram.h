// A thread-safe histogram of observed values (durations in seconds, mostly), read as a
// snapshot by the metrics endpoint (common/metrics.h). Plain C++: code that observes does
// not depend on Prometheus.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

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
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // guarded by mu_; per bucket, not cumulative
  double sum_ = 0;                // guarded by mu_
  uint64_t count_ = 0;            // guarded by mu_
};

// 1 ms to about 17 min, doubling: rounds, calls and inner steps all fit.
std::vector<double> DurationBuckets();

}  // namespace muloco
