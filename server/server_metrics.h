// The server's Prometheus metrics: names, help and values taken from the round engine's and
// the gRPC service's counters at scrape time.
#pragma once

#include <cstdint>
#include <vector>

#include "common/metrics.h"
#include "server/conn_gate.h"
#include "server/round_engine.h"
#include "server/service.h"

namespace muloco {

// dense_payload_bytes: one dense fp32 payload of this model (the reference for ratios).
std::vector<MetricSample> ServerMetrics(const EngineStats& e, const WireStats& w, const AuthStats& a, const GateStats& g,
                                        uint64_t dense_payload_bytes);

}  // namespace muloco
