// Histogram (see histogram.h).
#include "common/histogram.h"

#include <algorithm>

namespace muloco {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}

void Histogram::Observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  if (i < counts_.size()) ++counts_[i];
  sum_ += value;
  ++count_;
}

HistogramData Histogram::Snapshot() const {
  absl::MutexLock lock(&mu_);
  HistogramData d{bounds_, std::vector<uint64_t>(bounds_.size()), sum_, count_};
  uint64_t running = 0;
  for (size_t i = 0; i < counts_.size(); ++i) d.cumulative[i] = running += counts_[i];
  return d;
}

std::vector<double> DurationBuckets() {
  std::vector<double> b;
  for (double v = 0.001; v < 1100; v *= 2) b.push_back(v);
  return b;
}

}  // namespace muloco
