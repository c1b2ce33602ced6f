// MetricsEndpoint (see metrics.h): a prometheus::Collectable that turns snapshot samples
// into metric families, served by prometheus-cpp's Exposer.
#include "common/metrics.h"

#include <limits>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <cstdio>
#include <exception>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace muloco {
namespace {

class SnapshotCollectable : public prometheus::Collectable {
 public:
  explicit SnapshotCollectable(MetricsEndpoint::Snapshot snapshot) : snapshot_(std::move(snapshot)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families;
    std::map<std::string, size_t> index;  // name -> position in families
    for (const MetricSample& s : snapshot_()) {
      auto [it, fresh] = index.emplace(s.name, families.size());
      if (fresh) {
        const prometheus::MetricType type = s.histogram ? prometheus::MetricType::Histogram
                                            : s.counter  ? prometheus::MetricType::Counter
                                                         : prometheus::MetricType::Gauge;
        families.push_back(prometheus::MetricFamily{s.name, s.help, type, {}});
      }
      prometheus::ClientMetric m;
      for (const auto& [k, v] : s.labels) m.label.push_back(prometheus::ClientMetric::Label{k, v});
      if (s.histogram) {
        const HistogramData& h = *s.histogram;
        m.histogram.sample_count = h.count;
        m.histogram.sample_sum = h.sum;
        for (size_t i = 0; i < h.bounds.size(); ++i) m.histogram.bucket.push_back({h.cumulative[i], h.bounds[i]});
        m.histogram.bucket.push_back({h.count, std::numeric_limits<double>::infinity()});
      } else if (s.counter) {
        m.counter.value = s.value;
      } else {
        m.gauge.value = s.value;
      }
      families[it->second].metric.push_back(std::move(m));
    }
    return families;
  }

 private:
  MetricsEndpoint::Snapshot snapshot_;
};

}  // namespace

MetricSample HistogramSample(std::string name, std::string help, HistogramData data) {
  MetricSample s{std::move(name), std::move(help), false, 0.0};
  s.histogram = std::move(data);
  return s;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& address,
                                                                         Snapshot snapshot) {
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  try {
    e->exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/1);
  } catch (const std::exception& ex) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", ex.what()));
  }
  const std::vector<int> ports = e->exposer_->GetListeningPorts();
  if (ports.empty()) return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address));
  e->port_ = ports.front();
  e->collectable_ = std::make_shared<SnapshotCollectable>(std::move(snapshot));
  e->exposer_->RegisterCollectable(e->collectable_);
  return e;
}

MetricsEndpoint::~MetricsEndpoint() = default;

std::unique_ptr<MetricsEndpoint> StartMetricsOrReport(const std::string& address, const char* tag,
                                                      MetricsEndpoint::Snapshot snapshot, bool* failed) {
  *failed = false;
  if (address.empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> e = MetricsEndpoint::Start(address, std::move(snapshot));
  if (!e.ok()) {
    std::fprintf(stderr, "%s: %s\n", tag, std::string(e.status().message()).c_str());
    *failed = true;
    return nullptr;
  }
  Logf(tag, "metrics on port %d (/metrics)", (*e)->port());
  return *std::move(e);
}

}  // namespace muloco
