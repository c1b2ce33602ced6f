// The worker-report table (common/worker_stats.h) against the proto: every WorkerReport
// field has its row, a report survives the round trip, hostile values become 0, and each
// field is one metric.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "common/worker_stats.h"

namespace muloco {
namespace {

TEST(WorkerStats, TheTableCoversEveryReportField) {
  std::set<std::string> rows = {
#define MULOCO_NAME(type, field, metric, counter, help) #field,
      MULOCO_WORKER_STATS(MULOCO_NAME)
#undef MULOCO_NAME
  };
  const google::protobuf::Descriptor* d = v1::WorkerReport::descriptor();
  std::set<std::string> proto;
  for (int i = 0; i < d->field_count(); ++i) proto.insert(d->field(i)->name());
  EXPECT_EQ(rows, proto);
}

TEST(WorkerStats, AReportRoundTripsAndHostileValuesBecomeZero) {
  WorkerStats s;
  s.round = 7;
  s.bytes_up = uint64_t{1} << 40;
  s.train_loss = 2.5;
  s.wait_seconds = 0.125;
  const WorkerStats back = FromReport(ToReport(s));
  EXPECT_EQ(back.round, 7u);
  EXPECT_EQ(back.bytes_up, uint64_t{1} << 40);
  EXPECT_EQ(back.train_loss, 2.5);
  EXPECT_EQ(back.wait_seconds, 0.125);
  v1::WorkerReport hostile = ToReport(s);
  hostile.set_val_loss(std::numeric_limits<double>::quiet_NaN());
  hostile.set_tokens_per_second(-1e300);
  hostile.set_ef_residual_norm(std::numeric_limits<double>::infinity());
  const WorkerStats clean = FromReport(hostile);
  EXPECT_EQ(clean.val_loss, 0.0);
  EXPECT_EQ(clean.tokens_per_second, 0.0);
  EXPECT_EQ(clean.ef_residual_norm, 0.0);
  EXPECT_EQ(clean.train_loss, 2.5);
}

TEST(WorkerStats, EachFieldIsOneLabelledMetric) {
  WorkerStats s;
  s.tokens = 12345;
  const std::vector<MetricSample> m = WorkerMetrics(s, "w1");
  EXPECT_EQ(m.size(), static_cast<size_t>(v1::WorkerReport::descriptor()->field_count()));
  std::set<std::string> names;
  for (const MetricSample& x : m) {
    EXPECT_TRUE(names.insert(x.name).second) << x.name;
    ASSERT_EQ(x.labels.size(), 1u);
    EXPECT_EQ(x.labels[0].second, "w1");
    if (x.name == "muloco_worker_tokens_total") EXPECT_EQ(x.value, 12345.0);
  }
  EXPECT_TRUE(names.count("muloco_worker_tokens_total"));
}

}  // namespace
}  // namespace muloco
