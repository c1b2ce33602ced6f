// Prometheus /metrics endpoint (prometheus-cpp pull). The values are read at scrape time
// from a snapshot function, so the code that counts (round engine, service, worker session)
// stays free of Prometheus; this file is the only one that knows its types.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/histogram.h"

namespace prometheus {
class Collectable;
class Exposer;
}

namespace muloco {

struct MetricSample {
  std::string name;  // e.g. muloco_rounds_closed_total; samples sharing a name form one family
  std::string help;
  bool counter;      // counter (only grows) or gauge; ignored for a histogram
  double value;
  std::vector<std::pair<std::string, std::string>> labels = {};
  std::optional<HistogramData> histogram = std::nullopt;  // set: a histogram, `value` unused
};

// A histogram sample (HistogramData from common/histogram.h).
MetricSample HistogramSample(std::string name, std::string help, HistogramData data);

class MetricsEndpoint {
 public:
  using Snapshot = std::function<std::vector<MetricSample>()>;
  // Serves http://address/metrics ("host:port"; port 0 picks a free one). `snapshot` is
  // called on every scrape, from the endpoint's threads.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& address, Snapshot snapshot);
  ~MetricsEndpoint();

  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;
  std::shared_ptr<prometheus::Collectable> collectable_;  // the exposer holds a weak_ptr
  std::unique_ptr<prometheus::Exposer> exposer_;          // destroyed first
  int port_ = 0;
};

// Starts an endpoint when `address` is not empty and logs where it listens; nullptr (after
// printing why to stderr) when it cannot listen, and also, without a message, when
// `address` is empty. `*failed` tells the two apart.
std::unique_ptr<MetricsEndpoint> StartMetricsOrReport(const std::string& address, const char* tag,
                                                      MetricsEndpoint::Snapshot snapshot, bool* failed);

}  // namespace muloco
