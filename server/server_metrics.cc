// ServerMetrics (see server_metrics.h).
#include "server/server_metrics.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/version.h"

namespace muloco {

namespace {

double d(uint64_t v) { return static_cast<double>(v); }

void Append(std::vector<MetricSample>* out, std::vector<MetricSample> more) {
  for (MetricSample& m : more) out->push_back(std::move(m));
}

// The round engine's counters: rounds, membership, pushes and their rejections, bytes.
std::vector<MetricSample> EngineMetrics(const EngineStats& e, uint64_t dense_payload_bytes) {
  auto rejected = [&](const char* reason, uint64_t v) {
    return MetricSample{"muloco_rejected_pushes_total", "Pushes refused, by reason", true, d(v), {{"reason", reason}}};
  };
  return {
      {"muloco_open_round", "The round now open", false, d(e.open_round)},
      {"muloco_run_done", "1 once the final round has closed", false, e.done ? 1.0 : 0.0},
      {"muloco_live_workers", "Workers joined and not evicted or left", false, d(e.live_workers)},
      {"muloco_rounds_closed_total", "Rounds closed since this server started", true, d(e.rounds_closed)},
      {"muloco_joins_total", "Join calls served", true, d(e.joins)},
      {"muloco_leaves_total", "Workers that left", true, d(e.leaves)},
      {"muloco_evictions_total", "Workers evicted for missing heartbeats", true, d(e.evictions)},
      {"muloco_pushes_total", "Pushes accepted into a round", true, d(e.pushes_accepted)},
      {"muloco_participants", "Live participants (a token's sessions are one)", false, d(e.participants)},
      {"muloco_uncounted_pushes_total",
       "Pushes from a participant that had already pushed in the round (merged into its one vote)", true,
       d(e.uncounted_pushes)},
      {"muloco_held_payload_bytes_peak", "Most payload bytes held for screening at once since the server started",
       false, d(e.held_bytes_peak)},
      rejected("unknown_worker", e.rejected_unknown_worker),
      rejected("wrong_round", e.rejected_wrong_round),
      rejected("duplicate", e.rejected_duplicate),
      rejected("bad_payload", e.rejected_bad_payload),
      rejected("round_full", e.rejected_round_full),
      {"muloco_uplink_bytes_total", "Payload bytes of accepted pushes", true, d(e.bytes_up)},
      {"muloco_downlink_payload_bytes_total", "Payload bytes of each closed round's update, counted once",
       true, d(e.bytes_down)},
      {"muloco_dense_payload_bytes", "Bytes of one dense fp32 payload of this model (compression reference)",
       false, d(dense_payload_bytes)},
      {"muloco_downlink_resets_total", "Rounds whose outer step was discarded because the downlink failed its check",
       true, d(e.downlink_resets)},
      {"muloco_stragglers_total", "Expected participants missing when a round closed", true, d(e.stragglers)},
      {"muloco_straggler_waits_total", "Rounds that waited out the straggler deadline for a missing participant",
       true, d(e.straggler_waits)},
      {"muloco_stale_pushes_total", "Asynchronous mode: pushes merged from an older version than the open round's",
       true, d(e.stale_pushes)},
      {"muloco_push_staleness_total", "Asynchronous mode: versions the merged pushes lagged, summed", true,
       d(e.staleness_sum)},
      {"muloco_inner_steps_accepted_total", "Inner steps of accepted pushes, as counted (claims over the cap capped)",
       true, d(e.inner_steps_accepted)},
      {"muloco_inner_steps_merged_total", "Inner steps of the pushes merged into the model (screening left them in): "
       "the run's goodput, with the workers' capacity", true, d(e.inner_steps_merged)},
      {"muloco_capped_step_claims_total", "Pushes that claimed more inner steps than the server told their worker",
       true, d(e.capped_step_claims)},
      {"muloco_steps_told_below_h_total", "--adaptive_h: heartbeat replies telling a worker fewer inner steps than H",
       true, d(e.steps_told_below_h)},
      {"muloco_grace_seconds", "Asynchronous mode: the grace window the last round closed after", false, e.last_grace_s},
      {"muloco_round_contributors", "Updates summed in the last closed round", false, d(e.last_contributors)},
      {"muloco_round_expected", "Workers the last closed round waited for", false, d(e.last_expected)},
      HistogramSample("muloco_round_duration_seconds", "Seconds from a round's opening to its close",
                      e.round_durations),
  };
}

// The gRPC service's and the join tokens' counters: what was sent, what was refused.
std::vector<MetricSample> ServiceMetrics(const WireStats& w, const AuthStats& a) {
  auto refused = [&](const char* reason, uint64_t v) {
    return MetricSample{"muloco_refused_calls_total", "Calls refused before reaching the round engine, by reason",
                        true, d(v), {{"reason", reason}}};
  };
  return {
      {"muloco_downlink_bytes_sent_total", "Update payload bytes written to workers (AwaitRound)", true,
       d(w.update_bytes_sent)},
      {"muloco_updates_sent_total", "Round updates delivered to workers", true, d(w.updates_sent)},
      {"muloco_model_fetches_total", "Complete model fetches served", true, d(w.model_fetches)},
      {"muloco_model_bytes_sent_total", "Parameter bytes streamed by model fetches", true, d(w.model_bytes_sent)},
      refused("no_token", a.refused_no_token),
      refused("bad_token", a.refused_bad_token),
      refused("join_limit", a.refused_join_limit),
      refused("bad_session", a.refused_bad_session),
      refused("revoked_token", a.refused_revoked),
      refused("stream_limit", a.refused_stream_limit),
      refused("push_limit", a.refused_push_limit),
      refused("oversized_push", w.oversized_pushes),
      refused("idle_stream", w.idle_cancelled),
      {"muloco_sessions", "Open worker sessions", false, d(a.sessions)},
      {"muloco_join_tokens", "Join tokens in force", false, d(a.tokens)},
      {"muloco_token_reloads_total", "Token file loads", true, d(a.token_reloads)},
      {"muloco_token_reload_errors_total", "Token file loads that failed (the previous tokens stay)", true,
       d(a.token_reload_errors)},
      HistogramSample("muloco_push_duration_seconds", "Seconds a PushUpdate call took (read + aggregate)",
                      w.push_durations),
      HistogramSample("muloco_fetch_duration_seconds", "Seconds a FetchModel call took", w.fetch_durations),
  };
}

// The connection gate's counters (server/conn_gate.h).
std::vector<MetricSample> GateMetrics(const GateStats& g) {
  std::vector<MetricSample> out = {
      {"muloco_connections", "Client connections open (the gate's; gRPC sees only these)", false, d(g.open)},
      {"muloco_connections_accepted_total", "Client connections admitted", true, d(g.accepted)},
  };
  for (const auto& [reason, v] :
       {std::pair{"server_cap", g.refused_total}, std::pair{"address_cap", g.refused_per_address},
        std::pair{"displaced", g.displaced}, std::pair{"silent", g.silent_closed}}) {
    out.push_back({"muloco_connections_closed_total",
                   "Client connections closed by the gate: refused at a full cap (server_cap, address_cap), "
                   "closed to admit a newcomer (displaced), or silent since opening (silent)",
                   true, d(v), {{"reason", reason}}});
  }
  return out;
}

// Per worker: its own report's metrics and its staleness.
std::vector<MetricSample> PerWorkerMetrics(const EngineStats& e) {
  std::vector<MetricSample> out;
  std::set<std::string> seen;  // two live workers may share a name: the second gets its id too
  for (const EngineStats::Worker& wk : e.workers) {
    const std::string label = seen.insert(wk.name).second ? wk.name : absl::StrCat(wk.name, "#", wk.id);
    Append(&out, WorkerMetrics(wk.stats, label));
    out.push_back({"muloco_worker_staleness_rounds", "Rounds the worker's model is behind the server's open round",
                   false, e.open_round > wk.stats.round ? d(e.open_round - wk.stats.round) : 0.0,
                   {{"worker", label}}});
  }
  return out;
}

// Per participant: what robust screening did to its updates, in all and in the last round.
std::vector<MetricSample> ScreenMetrics(const EngineStats& e) {
  std::vector<MetricSample> out;
  for (const auto& [name, c] : e.screened) {
    for (const auto& [action, v] :
         {std::pair{"clip", c.clipped}, std::pair{"reduce", c.reduced}, std::pair{"reject", c.rejected}}) {
      out.push_back({"muloco_screened_updates_total",
                     "Rounds in which robust screening clipped a tensor of a participant's update, cut its weight, "
                     "or left it out",
                     true, d(v), {{"worker", name}, {"action", action}}});
    }
  }
  std::set<std::string> seen;
  for (const ScreenSample& s : e.last_screen) {
    if (!seen.insert(s.name).second) continue;
    const std::vector<std::pair<std::string, std::string>> labels{{"worker", s.name}};
    out.push_back({"muloco_screen_cosine", "Last round: a participant's update's cosine to the robust reference", false,
                   s.cosine, labels});
    out.push_back({"muloco_screen_last_cosine",
                   "Last round: a participant's update's cosine to last round's aggregate (the staleness check)", false,
                   s.last_cosine, labels});
    out.push_back({"muloco_screen_weight", "Last round: the share of a participant's weight that counted (0..1)", false,
                   s.share, labels});
    out.push_back({"muloco_screen_clipped_tensors", "Last round: tensors of a participant's update clipped", false,
                   d(s.clipped), labels});
  }
  return out;
}

}  // namespace

std::vector<MetricSample> ServerMetrics(const EngineStats& e, const WireStats& w, const AuthStats& a, const GateStats& g,
                                        uint64_t dense_payload_bytes) {
  std::vector<MetricSample> out = EngineMetrics(e, dense_payload_bytes);
  Append(&out, ServiceMetrics(w, a));
  Append(&out, GateMetrics(g));
  out.push_back({"muloco_build_info", "1, labelled with this build's version", false, 1.0, {{"version", MulocoVersion()}}});
  Append(&out, PerWorkerMetrics(e));
  Append(&out, ScreenMetrics(e));
  return out;
}

}  // namespace muloco
