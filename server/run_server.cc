// RunServer (see run_server.h): engine + auth + gRPC service + metrics, the serving loop,
// checkpoints and the final summary.
#include "server/run_server.h"

#include <grpcpp/health_check_service_interface.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <chrono>
#include <cstdio>
#include <map>
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

absl::Status CheckOptions(const ServerOptions& o) {
  if (!(o.round_timeout_s > 0) || !(o.heartbeat_timeout_s > 0) || o.service.chunk_bytes < 4 ||
      !(o.service.idle_timeout_s > 0) || !(o.service.max_await_s >= 1) || o.transport_memory_mb < 16 ||
      o.max_connections < 1 || o.max_connections_per_address < 1 || !(o.async.grace_min_s >= 0) ||
      !(o.async.grace_max_s >= o.async.grace_min_s)) {
    return absl::InvalidArgumentError(
        "need round_timeout_s > 0, heartbeat_timeout_s > 0, chunk_bytes >= 4, idle_timeout_s > 0, "
        "max_await_s >= 1, transport_memory_mb >= 16, max_connections >= 1, max_connections_per_address >= 1, "
        "0 <= grace_min_s <= grace_max_s");
  }
  return ValidateRunConfig(o.config);
}

}  // namespace

EngineOptions EngineOptionsFor(const ServerOptions& o, const v1::RunConfig& config, const ParamLayout& layout) {
  EngineOptions eo;
  eo.min_quorum = o.min_quorum;
  eo.async = o.async;
  eo.async.enabled = KindsOf(config).async;
  eo.round_timeout_s = o.round_timeout_s;
  eo.heartbeat_timeout_s = o.heartbeat_timeout_s;
  eo.total_rounds = config.total_rounds();
  eo.downlink = PlanSegments(CodecShapes(layout), *ParseCodec(config.downlink_codec()));
  eo.uplink = PlanSegments(CodecShapes(layout), *ParseCodec(config.uplink_codec()));
  eo.outer = OuterSgdOptions{config.outer_lr(), config.outer_momentum(), config.outer_nesterov(),
                             eo.async.enabled ? o.async.momentum_every : 1};
  eo.screen.mode = o.robust;
  eo.screen.trend = o.screen_trend >= 0 ? o.screen_trend : eo.async.enabled ? 0.5 : 0.0;
  eo.adaptive_h = o.adaptive_h;
  eo.min_inner_steps = o.min_inner_steps;
  // Pushes weigh by their inner steps (SignMuon's vote is one step, one vote: no weighting).
  if (KindsOf(config).mode != RunMode::kSignMuon) eo.inner_steps = config.inner_steps();
  if (KindsOf(config).mode == RunMode::kSignMuon) {
    eo.aggregation = Aggregation::kVote;
    eo.polar_steps = static_cast<int>(config.ns_steps());
    for (const ParamInfo& p : layout) {
      if (config.signmuon_polar() && UsesMuon(p.group) && p.shape.size() == 2) {
        eo.polar.push_back(MatrixRange{p.offset, static_cast<size_t>(p.shape[0]), static_cast<size_t>(p.shape[1])});
      }
      const float rate = WeightDecayFor(config, p.group);  // the inner optimizer's, per tensor
      if (rate > 0) eo.vote_decay.push_back(DecayRange{p.offset, p.numel, rate});
    }
    eo.vote_lr_factor = [config](uint64_t round) { return LearningRateFactor(config, round * config.inner_steps()); };
  }
  return eo;
}

namespace {

// The public model with what a reader needs to rebuild it: the built-in GPT's shape, or,
// for a user's model, just the tensors under their own names.
std::string ExportBytes(const v1::RunConfig& config, const ParamLayout& layout, bool builtin,
                        const std::vector<float>& params, uint64_t round) {
  const v1::ModelSpec& m = config.model();
  std::map<std::string, std::string> meta = {{"round", std::to_string(round)}, {"preset", config.preset()}};
  if (!builtin) {
    meta["format"] = "muloco";
    return SafetensorsBytes(layout, params.data(), meta);
  }
  meta.insert({{"format", IsLlama(m) ? "muloco-llama" : "muloco-gpt"}, {"vocab_size", std::to_string(m.vocab_size())},
               {"n_layer", std::to_string(m.n_layer())}, {"n_head", std::to_string(m.n_head())},
               {"d_model", std::to_string(m.d_model())}, {"context", std::to_string(m.context())}});
  if (m.tokenizer_checksum() != 0) meta["tokenizer_checksum"] = std::to_string(m.tokenizer_checksum());
  if (IsLlama(m)) {  // what a Hugging Face LlamaConfig needs besides the shapes (worker/llama.h)
    meta.insert({{"n_kv_head", std::to_string(KvHeads(m))}, {"ffn_dim", std::to_string(FfnDim(m))},
                 {"tie_embeddings", m.tie_embeddings() ? "true" : "false"}, {"rms_norm_eps", absl::StrCat(kLlamaRmsEps)},
                 {"rope_theta", absl::StrCat(kLlamaRopeBase)}});
  }
  return SafetensorsBytes(layout, params.data(), meta);
}

// The checkpoint's configuration with the requested changes that are safe mid-run applied:
// more rounds, and how often and how much to evaluate. Any other difference is refused,
// naming its flag, instead of being silently ignored.
absl::StatusOr<v1::RunConfig> ResumedConfig(const v1::RunConfig& saved, const v1::RunConfig& requested,
                                            uint64_t open_round) {
  v1::RunConfig out = saved;
  if (out.model().arch().empty()) out.mutable_model()->set_arch("gpt");  // written before the field existed
  std::vector<std::string> refused, applied;
  for (const std::string& field : DifferentFields(out, requested)) {
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
       "%llu inner steps, %llu claims capped; final checksum %016llx",
       (unsigned long long)st.rounds_closed, (unsigned long long)st.pushes_accepted, (unsigned long long)st.bytes_up,
       SizeNote(st.bytes_up, st.pushes_accepted, n).c_str(), (unsigned long long)st.bytes_down,
       SizeNote(st.bytes_down, st.rounds_closed, n).c_str(), (unsigned long long)st.rejected_unknown_worker,
       (unsigned long long)st.rejected_wrong_round, (unsigned long long)st.rejected_duplicate,
       (unsigned long long)st.rejected_bad_payload, (unsigned long long)st.evictions,
       (unsigned long long)st.inner_steps_accepted, (unsigned long long)st.capped_step_claims,
       (unsigned long long)checksum);
}

}  // namespace

namespace {

// What a run starts from: its configuration (a resumed checkpoint's, with the changes that
// are safe mid-run applied), its model's layout and the engine's initial state.
struct RunStart {
  v1::RunConfig config;
  ParamLayout layout;
  bool builtin = true;  // the layout is the config's GPT (else a user's model, from --init_model)
  EngineState initial;
};

// A status whose code is kInvalidArgument exits 2 (options, files or a checkpoint that
// cannot run); any other, 1 (a failure to act: cannot listen, cannot write).
int Exit(const absl::Status& s) {
  std::fprintf(stderr, "muloco-server: %s\n", std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::Status Invalid(const absl::Status& s) { return absl::InvalidArgumentError(s.message()); }

absl::Status Prefixed(const std::string& what, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

// A fresh run's model: the --init_model file's tensors and values, or the config's GPT from
// its init_seed; groups by --adamw_params.
absl::Status FreshModel(const ServerOptions& o, RunStart* start) {
  if (o.init_model.empty()) {
    start->layout = BuiltinLayout(start->config.model());
    start->initial.theta_pub = InitParams(start->config.model(), start->layout);
  } else {
    absl::StatusOr<std::string> bytes = ReadFile(o.init_model);
    if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat("--init_model=", o.init_model, ": cannot read it"));
    absl::StatusOr<SafetensorsModel> model = ParseSafetensors(*bytes);
    if (!model.ok()) return Invalid(Prefixed("--init_model=" + o.init_model, model.status()));
    start->layout = std::move(model->layout);
    start->initial.theta_pub = std::move(model->params);
    start->builtin = LayoutDifference(BuiltinLayout(start->config.model()), start->layout).empty();
  }
  if (absl::Status s = AssignGroups(o.adamw_params, &start->layout); !s.ok()) return s;
  start->initial.theta_true = start->initial.theta_pub;
  return absl::OkStatus();
}

// A resumed run's model: the checkpoint's layout and groups (older checkpoints: the config's
// GPT), which --adamw_params may not change.
absl::Status ResumedModel(const ServerOptions& o, ServerState* resumed, RunStart* start) {
  const ParamLayout gpt = BuiltinLayout(start->config.model());
  if (resumed->layout.tensors_size() == 0) {  // an older checkpoint: the config's GPT, grouped by the rule
    start->layout = gpt;
    if (absl::Status s = AssignGroups(o.adamw_params, &start->layout); !s.ok()) return s;
  } else {
    absl::StatusOr<ParamLayout> layout = LayoutFromProto(resumed->layout);
    if (!layout.ok()) return absl::DataLossError(absl::StrCat("checkpoint: ", layout.status().message()));
    start->layout = *std::move(layout);
    ParamLayout regrouped = start->layout;
    if (absl::Status s = AssignGroups(o.adamw_params, &regrouped); !s.ok()) return s;
    for (size_t i = 0; i < regrouped.size(); ++i) {
      if (regrouped[i].group != start->layout[i].group) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--checkpoint_dir=", o.checkpoint_dir, ": --adamw_params puts tensor ", regrouped[i].name,
            " in another optimizer group than the checkpoint's run did; restart with that run's --adamw_params"));
      }
    }
  }
  start->builtin = LayoutDifference(gpt, start->layout).empty();
  const size_t n = TotalParams(start->layout);
  if (resumed->theta_pub.size() != n) {
    return absl::DataLossError(absl::StrCat("checkpoint holds ", resumed->theta_pub.size(),
                                            " parameters, its model ", n));
  }
  start->initial = EngineState{resumed->open_round,          resumed->joins,
                               std::move(resumed->theta_true), std::move(resumed->theta_pub),
                               std::move(resumed->momentum),   std::move(resumed->delayed_sum),
                               resumed->delayed_steps};
  Logf("server", "resuming from checkpoint in %s at round %llu%s", o.checkpoint_dir.c_str(),
       static_cast<unsigned long long>(start->initial.open_round),
       o.init_model.empty() ? "" : " (--init_model not read: the checkpoint holds the model)");
  return absl::OkStatus();
}

absl::StatusOr<RunStart> StartOfRun(const ServerOptions& o) {
  std::optional<ServerState> resumed;
  if (!o.checkpoint_dir.empty()) {
    if (absl::Status s = MakeDirs(o.checkpoint_dir); !s.ok()) {
      return absl::InternalError(absl::StrCat("--checkpoint_dir: ", s.message()));
    }
    absl::StatusOr<ServerState> loaded = LoadNewestCheckpoint(o.checkpoint_dir);
    if (loaded.ok()) resumed = *std::move(loaded);
  }
  RunStart start{o.config};
  if (resumed) {
    absl::StatusOr<v1::RunConfig> merged = ResumedConfig(resumed->config, o.config, resumed->open_round);
    if (!merged.ok()) return Invalid(Prefixed("--checkpoint_dir=" + o.checkpoint_dir, merged.status()));
    start.config = *std::move(merged);
  }
  if (absl::Status s = ValidateRunConfig(start.config); !s.ok()) return absl::InvalidArgumentError(s.ToString());
  if (absl::Status s = resumed ? ResumedModel(o, &*resumed, &start) : FreshModel(o, &start); !s.ok()) return s;
  return start;
}

// Writes a checkpoint (and the export, if asked for) of each state the engine hands it.
std::function<void(const EngineState&)> CheckpointWriter(const ServerOptions& o, const RunStart& run) {
  return [dir = o.checkpoint_dir, keep = o.keep_checkpoints, export_path = o.export_path, config = run.config,
          layout = run.layout, builtin = run.builtin, proto = LayoutProto(run.layout)](const EngineState& st) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = WriteCheckpoint(
        dir,
        ServerState{st.open_round, st.joins, config, proto, st.theta_true, st.theta_pub, st.momentum, st.delayed_sum,
                    st.delayed_steps},
        keep);
    if (s.ok() && !export_path.empty()) {
      s = WriteFileAtomic(export_path, ExportBytes(config, layout, builtin, st.theta_pub, st.open_round));
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const auto round = static_cast<unsigned long long>(st.open_round);
    if (s.ok()) {
      Logf("server", "checkpoint at round %llu written (%.1f ms)", round, ms);
    } else {
      LogError("server", "checkpoint at round %llu FAILED: %s", round, s.ToString().c_str());
    }
  };
}

// Re-reads the join tokens on SIGHUP or once a second (a changed file), drops the sessions
// of evicted workers, and gives freed heap memory back to the system: glibc keeps what a
// burst (a flood of streams, a huge message cut off by the transport quota) freed, so RSS
// stayed at the burst's peak (+30 to +69 MB in test_adversary); trimmed, it returns to
// within ~2 MB.
class TokenReloader {
 public:
  TokenReloader(Auth* auth, const RoundEngine* engine, const Clock* clock)
      : auth_(auth), engine_(engine), clock_(clock), last_(clock->Now()) {}

  void Tick(bool hangup) {
    if (!hangup && clock_->Now() - last_ <= 1.0) return;
    const absl::Status s = auth_->Reload(hangup);
    if (!s.ok() && std::string(s.message()) != error_) Logf("server", "join tokens kept: %s", s.ToString().c_str());
    error_ = std::string(s.message());  // logged once, not every second
    auth_->Retain([this](uint64_t id) { return engine_->IsMember(id); });
    last_ = clock_->Now();
#ifdef __GLIBC__
    malloc_trim(0);
#endif
  }

 private:
  Auth* auth_;
  const RoundEngine* engine_;
  const Clock* clock_;
  double last_;
  std::string error_;
};

// The serving loop: ticks the engine until the run is done and its workers have left, or
// *stop turns true. Linger follows the workers, not the clock: a final update still arriving
// over a slow link (its tail may sit in socket buffers after the handler returned) is let
// finish while its worker heartbeats; a silent worker is evicted (heartbeat timeout) or its
// stalled stream cancelled (idle timeout).
void ServeUntilDone(const ServerOptions& o, RoundEngine* engine, MulocoService* service, Auth* auth,
                    const Clock* clock, const std::atomic<bool>* stop, std::atomic<bool>* reload) {
  TokenReloader tokens(auth, engine, clock);
  double done_since = -1;
  while (!stop->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    engine->Tick();
    tokens.Tick(reload->exchange(false));
    const RoundEngine::RunState st = engine->State();
    if (!st.done) continue;
    if (done_since < 0) done_since = clock->Now();
    const double quiet_since = std::max(done_since, st.last_heard);
    if (st.live_workers == 0 || (clock->Now() - quiet_since > o.linger_s && service->StreamsInFlight() == 0)) break;
  }
}

// The final model to --save_final and --export, and the summary line; the exit code.
int FinishRun(const ServerOptions& o, const RoundEngine& engine, const RunStart& run) {
  const ModelSnapshot snap = engine.Snapshot();
  int rc = 0;
  if (!o.save_final.empty()) {
    if (absl::Status s = WriteFloatsAtomic(o.save_final, *snap.params); !s.ok()) {
      rc = Exit(Prefixed("--save_final", s));
    }
  }
  if (!o.export_path.empty()) {
    if (absl::Status s = WriteFileAtomic(o.export_path, ExportBytes(run.config, run.layout, run.builtin, *snap.params, snap.round));
        !s.ok()) {
      rc = Exit(Prefixed("--export", s));
    } else {
      Logf("server", "exported the model at round %llu to %s (safetensors)", static_cast<unsigned long long>(snap.round),
           o.export_path.c_str());
    }
  }
  LogSummary(engine.Stats(), TotalParams(run.layout), snap.checksum);
  return rc;
}

}  // namespace

int RunServer(ServerOptions o, const std::atomic<bool>* stop, std::atomic<bool>* reload) {
  if (absl::Status s = CheckOptions(o); !s.ok()) return Exit(absl::InvalidArgumentError(s.ToString()));
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = MakeServerCredentials(o.tls);
  if (!creds.ok()) return Exit(Invalid(creds.status()));
  SystemClock clock;
  absl::StatusOr<std::unique_ptr<Auth>> auth = Auth::Create(o.auth, &clock);
  if (!auth.ok()) return Exit(Invalid(auth.status()));
  if (o.auth.open_join && o.auth.token_file.empty()) Logf("server", "open join: anyone who can reach this server may join");
  absl::StatusOr<RunStart> run = StartOfRun(o);
  if (!run.ok()) return Exit(run.status());

  const size_t n = TotalParams(run->layout);
  EngineOptions eo = EngineOptionsFor(o, run->config, run->layout);
  if (!o.checkpoint_dir.empty()) {
    eo.checkpoint_every = std::max<uint32_t>(1, o.checkpoint_every);
    eo.checkpoint = CheckpointWriter(o, *run);
  }
  RoundEngine engine(eo, std::move(run->initial), &clock);
  ServiceOptions so = o.service;
  so.max_payload_bytes = PayloadBytes(eo.uplink);  // pushes must be in the run's codec (the engine checks)
  MulocoService service(&engine, auth->get(), run->config, run->layout, so, &clock);

  grpc::EnableDefaultHealthCheckService(true);
  const ServingOptions serving_options{
      o.listen, o.max_connections, o.max_connections_per_address, o.max_threads, o.transport_memory_mb,
      // One chunk of a push; workers chunk at 1 MiB whatever this server streams with.
      static_cast<int>(std::max<size_t>(so.chunk_bytes, 4 << 20)) + (1 << 16)};
  absl::StatusOr<std::unique_ptr<Serving>> serving = Serving::Start(serving_options, *creds, &service);
  if (!serving.ok()) return Exit(absl::InternalError(serving.status().message()));
  const int port = (*serving)->port();
  if (!o.port_file.empty()) {
    if (absl::Status s = WriteFileAtomic(o.port_file, absl::StrCat(port, "\n")); !s.ok()) {
      return Exit(absl::InternalError(absl::StrCat("--port_file: ", s.message())));
    }
  }
  Logf("server", "serving on port %d: %s, %zu parameters%s", port, DescribeRunConfig(run->config).c_str(), n,
       run->builtin ? "" : absl::StrCat(" in the ", run->layout.size(), " tensors of --init_model (not the GPT)").c_str());
  bool metrics_failed = false;
  const uint64_t dense_bytes = PayloadBytes(DenseSegments(n));
  std::unique_ptr<MetricsEndpoint> metrics = StartMetricsOrReport(
      o.metrics_listen, "server",
      [&] { return ServerMetrics(engine.Stats(), service.Wire(), (*auth)->Stats(), (*serving)->Gate(), dense_bytes); },
      &metrics_failed);
  if (metrics_failed) return 1;

  ServeUntilDone(o, &engine, &service, auth->get(), &clock, stop, reload);
  if (stop->load() && eo.checkpoint) eo.checkpoint(engine.ExportState());  // SIGTERM: save where we are
  service.BeginShutdown();
  engine.WakeAll();
  (*serving)->server()->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return FinishRun(o, engine, *run);
}

}  // namespace muloco
