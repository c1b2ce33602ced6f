// RunServer (see run_server.h): engine + auth + gRPC service + metrics, the serving loop,
// checkpoints and the final summary.
#include "server/run_server.h"

#include <grpcpp/health_check_service_interface.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "codec/codec.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/model_layout.h"
#include "common/run_config.h"
#include "common/safetensors.h"
#include "server/checkpoint.h"
#include "server/round_engine.h"
#include "server/server_metrics.h"
#include "server/serving.h"

namespace muloco {
namespace {

int Refuse(const std::string& why) {
  std::fprintf(stderr, "muloco-server: %s\n", why.c_str());
  return 2;
}

absl::Status CheckOptions(const ServerOptions& o) {
  if (!(o.round_timeout_s > 0) || !(o.heartbeat_timeout_s > 0) || o.service.chunk_bytes < 4 ||
      !(o.service.idle_timeout_s > 0) || !(o.service.max_await_s >= 1) || o.transport_memory_mb < 16 ||
      o.max_connections < 1 || o.max_connections_per_address < 1) {
    return absl::InvalidArgumentError(
        "need round_timeout_s > 0, heartbeat_timeout_s > 0, chunk_bytes >= 4, idle_timeout_s > 0, "
        "max_await_s >= 1, transport_memory_mb >= 16, max_connections >= 1, max_connections_per_address >= 1");
  }
  return ValidateRunConfig(o.config);
}

}  // namespace

EngineOptions EngineOptionsFor(const ServerOptions& o, const v1::RunConfig& config, const ParamLayout& layout) {
  EngineOptions eo;
  eo.min_quorum = o.min_quorum;
  eo.round_timeout_s = o.round_timeout_s;
  eo.heartbeat_timeout_s = o.heartbeat_timeout_s;
  eo.total_rounds = config.total_rounds();
  eo.downlink = PlanSegments(CodecShapes(layout), *ParseCodec(config.downlink_codec()));
  eo.uplink = PlanSegments(CodecShapes(layout), *ParseCodec(config.uplink_codec()));
  eo.outer = OuterSgdOptions{config.outer_lr(), config.outer_momentum(), config.outer_nesterov()};
  eo.screen.mode = o.robust;
  if (KindsOf(config).mode == RunMode::kSignMuon) {
    eo.aggregation = Aggregation::kVote;
    eo.polar_steps = static_cast<int>(config.ns_steps());
    for (const ParamInfo& p : layout) {
      if (config.signmuon_polar() && UsesMuon(p.kind)) {
        eo.polar.push_back(MatrixRange{p.offset, static_cast<size_t>(p.shape[0]), static_cast<size_t>(p.shape[1])});
      }
      const float rate = WeightDecayFor(config, p.kind);  // the inner optimizer's, per tensor
      if (rate > 0) eo.vote_decay.push_back(DecayRange{p.offset, p.numel, rate});
    }
    eo.vote_lr_factor = [config](uint64_t round) { return LearningRateFactor(config, round * config.inner_steps()); };
  }
  return eo;
}

namespace {

// The public model with what a reader needs to rebuild it.
std::string ExportBytes(const v1::RunConfig& config, const ParamLayout& layout, const std::vector<float>& params,
                        uint64_t round) {
  const v1::ModelSpec& m = config.model();
  return SafetensorsBytes(layout, params.data(),
                          {{"format", "muloco-gpt"}, {"round", std::to_string(round)},
                           {"vocab_size", std::to_string(m.vocab_size())}, {"n_layer", std::to_string(m.n_layer())},
                           {"n_head", std::to_string(m.n_head())}, {"d_model", std::to_string(m.d_model())},
                           {"context", std::to_string(m.context())}, {"preset", config.preset()}});
}

// The checkpoint's configuration with the requested changes that are safe mid-run applied:
// more rounds, and how often and how much to evaluate. Any other difference is refused,
// naming its flag, instead of being silently ignored.
absl::StatusOr<v1::RunConfig> ResumedConfig(const v1::RunConfig& saved, const v1::RunConfig& requested,
                                            uint64_t open_round) {
  v1::RunConfig out = saved;
  std::vector<std::string> refused, applied;
  for (const std::string& field : DifferentFields(saved, requested)) {
    if (field == "preset") continue;  // a label; the fields themselves are compared
    if (field == "total_rounds" && requested.total_rounds() >= open_round) {
      out.set_total_rounds(requested.total_rounds());
    } else if (field == "eval_every") {
      out.set_eval_every(requested.eval_every());
    } else if (field == "eval_batches") {
      out.set_eval_batches(requested.eval_batches());
    } else {
      refused.push_back(FlagForField(field));
      continue;
    }
    applied.push_back(FlagForField(field));
  }
  if (!refused.empty()) {
    std::string detail;
    for (const std::string& flag : refused) {
      absl::StrAppend(&detail, detail.empty() ? "" : ", ", "--", flag);
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint's run differs in ", detail, ", which cannot change mid-run (--rounds, --eval_every and ",
        "--eval_batches can; --rounds not below the ", open_round,
        " rounds done). Restart with the checkpoint's values (--print_config shows yours), or use a fresh "
        "--checkpoint_dir"));
  }
  for (const std::string& flag : applied) Logf("server", "resume: --%s changed from the checkpoint's, applied", flag.c_str());
  return out;
}

void LogSummary(const EngineStats& st, size_t n, uint64_t checksum) {
  Logf("server",
       "summary: %llu rounds closed, %llu pushes, up %llu bytes (%s), down %llu bytes per worker (%s), "
       "rejected: %llu unknown worker, %llu wrong round, %llu duplicate, %llu bad payload; evictions %llu; "
       "final checksum %016llx",
       (unsigned long long)st.rounds_closed, (unsigned long long)st.pushes_accepted, (unsigned long long)st.bytes_up,
       SizeNote(st.bytes_up, st.pushes_accepted, n).c_str(), (unsigned long long)st.bytes_down,
       SizeNote(st.bytes_down, st.rounds_closed, n).c_str(), (unsigned long long)st.rejected_unknown_worker,
       (unsigned long long)st.rejected_wrong_round, (unsigned long long)st.rejected_duplicate,
       (unsigned long long)st.rejected_bad_payload, (unsigned long long)st.evictions, (unsigned long long)checksum);
}

}  // namespace

int RunServer(ServerOptions o, const std::atomic<bool>* stop, std::atomic<bool>* reload) {
  if (absl::Status s = CheckOptions(o); !s.ok()) return Refuse(s.ToString());
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = MakeServerCredentials(o.tls);
  if (!creds.ok()) return Refuse(std::string(creds.status().message()));
  SystemClock clock;
  absl::StatusOr<std::unique_ptr<Auth>> auth = Auth::Create(o.auth, &clock);
  if (!auth.ok()) return Refuse(std::string(auth.status().message()));
  if (o.auth.open_join && o.auth.token_file.empty()) Logf("server", "open join: anyone who can reach this server may join");

  std::optional<ServerState> resumed;
  if (!o.checkpoint_dir.empty()) {
    if (absl::Status s = MakeDirs(o.checkpoint_dir); !s.ok()) {
      std::fprintf(stderr, "muloco-server: --checkpoint_dir: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    absl::StatusOr<ServerState> loaded = LoadNewestCheckpoint(o.checkpoint_dir);
    if (loaded.ok()) resumed = *std::move(loaded);
  }
  // A resumed run keeps the configuration it started with, but for what may safely change.
  v1::RunConfig config = o.config;
  if (resumed) {
    absl::StatusOr<v1::RunConfig> merged = ResumedConfig(resumed->config, o.config, resumed->open_round);
    if (!merged.ok()) return Refuse(absl::StrCat("--checkpoint_dir=", o.checkpoint_dir, ": ", merged.status().message()));
    config = *std::move(merged);
  }
  if (absl::Status s = ValidateRunConfig(config); !s.ok()) return Refuse(s.ToString());
  const ParamLayout layout = GptLayout(config.model());
  const size_t n = TotalParams(layout);
  EngineOptions eo = EngineOptionsFor(o, config, layout);
  if (!o.checkpoint_dir.empty()) {
    eo.checkpoint_every = std::max<uint32_t>(1, o.checkpoint_every);
    eo.checkpoint = [&o, &config, &layout](const EngineState& st) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::Status s = WriteCheckpoint(
          o.checkpoint_dir, ServerState{st.open_round, st.joins, config, st.theta_true, st.theta_pub, st.momentum},
          o.keep_checkpoints);
      if (s.ok() && !o.export_path.empty()) {
        s = WriteFileAtomic(o.export_path, ExportBytes(config, layout, st.theta_pub, st.open_round));
      }
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s.ok()) {
        Logf("server", "checkpoint at round %llu written (%.1f ms)", static_cast<unsigned long long>(st.open_round), ms);
      } else {
        LogError("server", "checkpoint at round %llu FAILED: %s", static_cast<unsigned long long>(st.open_round),
             s.ToString().c_str());
      }
    };
  }
  EngineState initial;
  if (resumed) {
    if (resumed->theta_pub.size() != n) {
      std::fprintf(stderr, "muloco-server: checkpoint holds %zu parameters, its config implies %zu\n",
                   resumed->theta_pub.size(), n);
      return 1;
    }
    initial = EngineState{resumed->open_round, resumed->joins, std::move(resumed->theta_true), std::move(resumed->theta_pub),
                          std::move(resumed->momentum)};
    Logf("server", "resuming from checkpoint in %s at round %llu", o.checkpoint_dir.c_str(),
         static_cast<unsigned long long>(initial.open_round));
  } else {
    initial.theta_pub = InitParams(config.model(), layout);
    initial.theta_true = initial.theta_pub;
  }
  RoundEngine engine(eo, std::move(initial), &clock);
  ServiceOptions so = o.service;
  so.max_payload_bytes = PayloadBytes(eo.uplink);  // pushes must be in the run's codec (the engine checks)
  MulocoService service(&engine, auth->get(), config, so, &clock);

  grpc::EnableDefaultHealthCheckService(true);
  const ServingOptions serving_options{
      o.listen, o.max_connections, o.max_connections_per_address, o.max_threads, o.transport_memory_mb,
      // One chunk of a push; workers chunk at 1 MiB whatever this server streams with.
      static_cast<int>(std::max<size_t>(so.chunk_bytes, 4 << 20)) + (1 << 16)};
  absl::StatusOr<std::unique_ptr<Serving>> serving = Serving::Start(serving_options, *creds, &service);
  if (!serving.ok()) {
    std::fprintf(stderr, "muloco-server: %s\n", std::string(serving.status().message()).c_str());
    return 1;
  }
  const int port = (*serving)->port();
  if (!o.port_file.empty()) {
    if (absl::Status s = WriteFileAtomic(o.port_file, absl::StrCat(port, "\n")); !s.ok()) {
      std::fprintf(stderr, "muloco-server: --port_file: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  Logf("server", "serving on port %d: %s, %zu parameters", port, DescribeRunConfig(config).c_str(), n);
  bool metrics_failed = false;
  const uint64_t dense_bytes = PayloadBytes(DenseSegments(n));
  std::unique_ptr<MetricsEndpoint> metrics = StartMetricsOrReport(
      o.metrics_listen, "server",
      [&] { return ServerMetrics(engine.Stats(), service.Wire(), (*auth)->Stats(), (*serving)->Gate(), dense_bytes); }, &metrics_failed);
  if (metrics_failed) return 1;

  double done_since = -1;
  double last_reload = clock.Now();
  std::string reload_error;  // logged once, not every second
  while (!stop->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    engine.Tick();
    const bool hangup = reload->exchange(false);
    if (hangup || clock.Now() - last_reload > 1.0) {  // SIGHUP, or a changed file
      const absl::Status s = (*auth)->Reload(hangup);
      if (!s.ok() && std::string(s.message()) != reload_error) Logf("server", "join tokens kept: %s", s.ToString().c_str());
      reload_error = std::string(s.message());
      (*auth)->Retain([&](uint64_t id) { return engine.IsMember(id); });  // sessions of evicted workers
      last_reload = clock.Now();
      // Give freed heap memory back to the system: glibc keeps what a burst (a flood of
      // streams, a huge message cut off by the transport quota) freed, so RSS stayed at the
      // burst's peak (+30 to +69 MB in test_adversary); trimmed, it returns to within ~2 MB.
#ifdef __GLIBC__
      malloc_trim(0);
#endif
    }
    const RoundEngine::RunState st = engine.State();
    if (!st.done) continue;
    if (done_since < 0) done_since = clock.Now();
    // Linger follows the workers, not the clock: a final update still arriving over a slow
    // link (its tail may sit in socket buffers after the handler returned) is let finish
    // while its worker heartbeats; a silent worker is evicted (heartbeat timeout) or its
    // stalled stream cancelled (idle timeout).
    const double quiet_since = std::max(done_since, st.last_heard);
    if (st.live_workers == 0 || (clock.Now() - quiet_since > o.linger_s && service.StreamsInFlight() == 0)) break;
  }
  if (stop->load() && eo.checkpoint) eo.checkpoint(engine.ExportState());  // SIGTERM: save where we are
  service.BeginShutdown();
  engine.WakeAll();
  (*serving)->server()->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));

  const ModelSnapshot snap = engine.Snapshot();
  int rc = 0;
  if (!o.save_final.empty()) {
    if (absl::Status s = WriteFloatsAtomic(o.save_final, *snap.params); !s.ok()) {
      std::fprintf(stderr, "muloco-server: --save_final: %s\n", std::string(s.message()).c_str());
      rc = 1;
    }
  }
  if (!o.export_path.empty()) {
    if (absl::Status s = WriteFileAtomic(o.export_path, ExportBytes(config, layout, *snap.params, snap.round)); !s.ok()) {
      std::fprintf(stderr, "muloco-server: --export: %s\n", std::string(s.message()).c_str());
      rc = 1;
    } else {
      Logf("server", "exported the model at round %llu to %s (safetensors)", static_cast<unsigned long long>(snap.round),
           o.export_path.c_str());
    }
  }
  LogSummary(engine.Stats(), n, snap.checksum);
  return rc;
}

}  // namespace muloco
