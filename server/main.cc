// muloco-server: the aggregation server. Flags -> Options, then serve until the run ends
// (and every worker has left, or --linger_s passes) or SIGINT/SIGTERM arrives.
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "absl/flags/flag.h"
#include "common/cli.h"
#include "common/codec.h"
#include "common/log.h"
#include "common/model_layout.h"
#include "common/run_config.h"
#include "common/run_config_flags.h"
#include "common/tls.h"
#include "server/auth.h"
#include "server/checkpoint.h"
#include "common/metrics.h"
#include "server/round_engine.h"
#include "server/server_metrics.h"
#include "server/service.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7070", "Address to serve on (port 0 picks a free port)");
ABSL_FLAG(std::string, port_file, "", "If set, write the bound port here once serving");
ABSL_FLAG(uint32_t, min_quorum, 1, "Pushes required before a round may close");
ABSL_FLAG(double, round_timeout_s, 120, "After a round's first push, close it this many seconds later at most");
ABSL_FLAG(double, heartbeat_timeout_s, 30, "Evict a worker silent for this many seconds");
ABSL_FLAG(uint32_t, chunk_bytes, 1 << 20, "Bytes per streamed chunk");
ABSL_FLAG(double, linger_s, 30, "After the final round, keep serving until all workers leave or this passes");
ABSL_FLAG(std::string, checkpoint_dir, "", "Checkpoint here and resume from the newest good checkpoint on start");
ABSL_FLAG(uint32_t, checkpoint_every, 1, "Rounds between checkpoints (also on the final round and on SIGTERM)");
ABSL_FLAG(uint32_t, keep_checkpoints, 3, "Checkpoints kept (the newest)");
ABSL_FLAG(std::string, save_final, "", "If set, write the final public parameters (raw fp32) here");
ABSL_FLAG(bool, insecure, false, "Serve plaintext gRPC (no TLS): tests and local demos only");
ABSL_FLAG(std::string, tls_cert, "", "TLS: the server's certificate chain (PEM)");
ABSL_FLAG(std::string, tls_key, "", "TLS: the server's private key (PEM)");
ABSL_FLAG(std::string, tls_client_ca, "", "Mutual TLS: workers must present a certificate signed by this CA (PEM)");
ABSL_FLAG(std::string, join_tokens, "",
          "Join tokens, one 'LABEL TOKEN' per line ('#' comments); reloaded on change and on SIGHUP. "
          "A token removed from the file is revoked: its workers are refused at their next call");
ABSL_FLAG(bool, open_join, false, "Let anyone join without a token (public runs)");
ABSL_FLAG(std::string, robust, "clip",
          "Screening of pushed updates by norm against the round's median/MAD: clip, reject or off");
ABSL_FLAG(uint32_t, max_workers, 1024, "Live workers at most");
ABSL_FLAG(uint32_t, max_workers_per_token, 64, "Live workers per join token at most");
ABSL_FLAG(uint32_t, max_joins_per_minute, 600, "Joins accepted per minute, in all");
ABSL_FLAG(uint32_t, max_joins_per_token_per_minute, 60, "Joins accepted per minute, per token");
ABSL_FLAG(uint32_t, max_streams_per_worker, 4, "Streaming calls in flight per worker");
ABSL_FLAG(uint32_t, max_push_attempts_per_round, 8, "PushUpdate calls per worker per round");
ABSL_FLAG(uint32_t, max_push_chunks, 4096, "Chunks in one push");
ABSL_FLAG(double, idle_timeout_s, 60, "Cancel a stream that moves no chunk for this long");
ABSL_FLAG(double, max_await_s, 30, "One AwaitRound call waits this long at most (the worker asks again)");
ABSL_FLAG(uint32_t, transport_memory_mb, 256,
          "Memory gRPC's transport may hold for incoming data (an oversized message is cut off here)");
ABSL_FLAG(uint32_t, max_threads, 512, "gRPC handler threads at most (further calls: RESOURCE_EXHAUSTED)");
ABSL_FLAG(std::string, metrics_listen, "",
          "Serve Prometheus metrics at http://ADDRESS/metrics, e.g. 0.0.0.0:9090 (port 0 picks one; empty: off)");

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
void OnSignal(int) { g_stop = true; }
void OnHangup(int) { g_reload = true; }

bool WriteFile(const std::string& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace muloco;
  ParseCommandLine(argc, argv,
                   "muloco-server: DiLoCo/MuLoCo aggregation server.\n"
                   "  muloco-server --listen=0.0.0.0:7070 --rounds=10 --inner_steps=20");
  signal(SIGINT, OnSignal);  // before anything can be told we serve
  signal(SIGTERM, OnSignal);
  signal(SIGHUP, OnHangup);
  const std::string ckpt_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  std::optional<ServerState> resumed;
  if (!ckpt_dir.empty()) {
    if (std::system(("mkdir -p '" + ckpt_dir + "'").c_str()) != 0) {
      std::fprintf(stderr, "muloco-server: cannot create --checkpoint_dir %s\n", ckpt_dir.c_str());
      return 1;
    }
    absl::StatusOr<ServerState> loaded = LoadNewestCheckpoint(ckpt_dir);
    if (loaded.ok()) resumed = *std::move(loaded);
  }
  // A resumed run keeps the configuration it started with.
  const v1::RunConfig config = resumed ? resumed->config : RunConfigFromFlags();
  if (absl::Status s = ValidateRunConfig(config); !s.ok()) {
    std::fprintf(stderr, "muloco-server: %s\n", s.ToString().c_str());
    return 2;
  }
  EngineOptions eo;
  eo.min_quorum = absl::GetFlag(FLAGS_min_quorum);
  eo.round_timeout_s = absl::GetFlag(FLAGS_round_timeout_s);
  eo.heartbeat_timeout_s = absl::GetFlag(FLAGS_heartbeat_timeout_s);
  eo.total_rounds = config.total_rounds();
  const ParamLayout layout = GptLayout(config.model());
  const size_t n = TotalParams(layout);
  eo.downlink = PlanSegments(CodecShapes(layout), *ParseCodec(config.downlink_codec()));
  const std::vector<Segment> uplink = PlanSegments(CodecShapes(layout), *ParseCodec(config.uplink_codec()));
  eo.outer = OuterSgdOptions{config.outer_lr(), config.outer_momentum(), config.outer_nesterov()};
  if (config.mode() == "signmuon") {
    eo.aggregation = Aggregation::kVote;
    eo.polar_steps = static_cast<int>(config.ns_steps());
    for (const ParamInfo& p : layout) {
      if (config.signmuon_polar() && UsesMuon(p.kind)) {
        eo.polar.push_back(MatrixRange{p.offset, static_cast<size_t>(p.shape[0]), static_cast<size_t>(p.shape[1])});
      }
    }
  }
  eo.uplink = uplink;
  if (!ParseRobust(absl::GetFlag(FLAGS_robust), &eo.screen.mode)) {
    std::fprintf(stderr, "muloco-server: --robust must be clip, reject or off\n");
    return 2;
  }
  if (!(eo.round_timeout_s > 0) || !(eo.heartbeat_timeout_s > 0) || absl::GetFlag(FLAGS_chunk_bytes) < 4 ||
      !(absl::GetFlag(FLAGS_idle_timeout_s) > 0) || !(absl::GetFlag(FLAGS_max_await_s) >= 1) ||
      absl::GetFlag(FLAGS_transport_memory_mb) < 16) {
    std::fprintf(stderr,
                 "muloco-server: need round_timeout_s > 0, heartbeat_timeout_s > 0, chunk_bytes >= 4, "
                 "idle_timeout_s > 0, max_await_s >= 1, transport_memory_mb >= 16\n");
    return 2;
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = MakeServerCredentials(
      ServerTls{absl::GetFlag(FLAGS_insecure), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                absl::GetFlag(FLAGS_tls_client_ca)});
  if (!creds.ok()) {
    std::fprintf(stderr, "muloco-server: %s\n", std::string(creds.status().message()).c_str());
    return 2;
  }

  if (!ckpt_dir.empty()) {
    eo.checkpoint_every = std::max<uint32_t>(1, absl::GetFlag(FLAGS_checkpoint_every));
    eo.checkpoint = [&ckpt_dir, &config](const EngineState& st) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::Status s = WriteCheckpoint(ckpt_dir, ServerState{st.open_round, config, st.theta_true, st.theta_pub, st.momentum},
                                       absl::GetFlag(FLAGS_keep_checkpoints));
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s.ok()) {
        Logf("server", "checkpoint at round %llu written (%.1f ms)", static_cast<unsigned long long>(st.open_round), ms);
      } else {
        Logf("server", "checkpoint at round %llu FAILED: %s", static_cast<unsigned long long>(st.open_round),
             s.ToString().c_str());
      }
    };
  }
  SystemClock clock;
  AuthOptions ao;
  ao.token_file = absl::GetFlag(FLAGS_join_tokens);
  ao.open_join = absl::GetFlag(FLAGS_open_join);
  ao.max_workers = absl::GetFlag(FLAGS_max_workers);
  ao.max_workers_per_token = absl::GetFlag(FLAGS_max_workers_per_token);
  ao.max_joins_per_minute = absl::GetFlag(FLAGS_max_joins_per_minute);
  ao.max_joins_per_token_per_minute = absl::GetFlag(FLAGS_max_joins_per_token_per_minute);
  ao.max_streams_per_worker = absl::GetFlag(FLAGS_max_streams_per_worker);
  ao.max_push_attempts_per_round = absl::GetFlag(FLAGS_max_push_attempts_per_round);
  absl::StatusOr<std::unique_ptr<Auth>> auth = Auth::Create(ao, &clock);
  if (!auth.ok()) {
    std::fprintf(stderr, "muloco-server: %s\n", std::string(auth.status().message()).c_str());
    return 2;
  }
  if (ao.open_join && ao.token_file.empty()) Logf("server", "open join: anyone who can reach this server may join");
  EngineState initial;
  if (resumed) {
    if (resumed->theta_pub.size() != n) {
      std::fprintf(stderr, "muloco-server: checkpoint holds %zu parameters, its config implies %zu\n",
                   resumed->theta_pub.size(), n);
      return 1;
    }
    initial = EngineState{resumed->open_round, std::move(resumed->theta_true), std::move(resumed->theta_pub),
                          std::move(resumed->momentum)};
    Logf("server", "resuming from checkpoint in %s at round %llu", ckpt_dir.c_str(),
         static_cast<unsigned long long>(initial.open_round));
  } else {
    initial.theta_pub = InitParams(config.model(), layout);
    initial.theta_true = initial.theta_pub;
  }
  RoundEngine engine(eo, std::move(initial), &clock);
  // Pushes may use the run's uplink codec or dense fp32, nothing larger.
  ServiceOptions so;
  so.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  so.max_payload_bytes = PayloadBytes(uplink);  // pushes must be in the run's codec (the engine checks)
  so.max_push_chunks = absl::GetFlag(FLAGS_max_push_chunks);
  so.max_await_s = absl::GetFlag(FLAGS_max_await_s);
  so.idle_timeout_s = absl::GetFlag(FLAGS_idle_timeout_s);
  MulocoService service(&engine, auth->get(), config, so, &clock);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), *creds, &port);
  // Idle streams hold a thread each (sync API): cap them; past the cap calls get RESOURCE_EXHAUSTED.
  grpc::ResourceQuota quota("muloco-server");
  quota.SetMaxThreads(static_cast<int>(std::max<uint32_t>(8, absl::GetFlag(FLAGS_max_threads))));
  // gRPC 1.51 buffers a whole incoming message before checking its size (grpc/grpc#43012):
  // the quota bounds what its transport may hold; past it, streams are reset.
  quota.Resize(size_t{absl::GetFlag(FLAGS_transport_memory_mb)} << 20);
  builder.SetResourceQuota(quota);
  builder.RegisterService(&service);
  // Workers ping every 10 s to notice dead links; let them, even between calls.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.SetMaxReceiveMessageSize(static_cast<int>(absl::GetFlag(FLAGS_chunk_bytes)) + (1 << 16));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "muloco-server: cannot listen on %s\n", absl::GetFlag(FLAGS_listen).c_str());
    return 1;
  }
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    const std::string tmp = absl::GetFlag(FLAGS_port_file) + ".tmp";
    const std::string text = std::to_string(port) + "\n";
    if (!WriteFile(tmp, text.data(), text.size()) || std::rename(tmp.c_str(), absl::GetFlag(FLAGS_port_file).c_str())) {
      std::fprintf(stderr, "muloco-server: cannot write --port_file\n");
      return 1;
    }
  }
  Logf("server", "serving on port %d: %s, %zu parameters", port, DescribeRunConfig(config).c_str(),
       engine.num_params());
  bool metrics_failed = false;
  const uint64_t dense_bytes = PayloadBytes(DenseSegments(n));
  std::unique_ptr<MetricsEndpoint> metrics = StartMetricsOrReport(
      absl::GetFlag(FLAGS_metrics_listen), "server",
      [&] { return ServerMetrics(engine.Stats(), service.Wire(), (*auth)->Stats(), dense_bytes); }, &metrics_failed);
  if (metrics_failed) return 1;

  double done_since = -1;
  double last_reload = clock.Now();
  std::string reload_error;  // logged once, not every second
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    engine.Tick();
    const bool hangup = g_reload.exchange(false);
    if (hangup || clock.Now() - last_reload > 1.0) {  // SIGHUP, or a changed file
      const absl::Status s = (*auth)->Reload(hangup);
      if (!s.ok() && std::string(s.message()) != reload_error) Logf("server", "join tokens kept: %s", s.ToString().c_str());
      reload_error = std::string(s.message());
      (*auth)->Retain([&](uint64_t id) { return engine.IsMember(id); });  // sessions of evicted workers
      last_reload = clock.Now();
    }
    const EngineStats st = engine.Stats();
    if (!st.done) continue;
    if (done_since < 0) done_since = clock.Now();
    if (st.live_workers == 0 || clock.Now() - done_since > absl::GetFlag(FLAGS_linger_s)) break;
  }
  if (g_stop && eo.checkpoint) eo.checkpoint(engine.ExportState());  // SIGTERM: save where we are
  service.BeginShutdown();
  engine.WakeAll();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));

  const EngineStats st = engine.Stats();
  const double dense = static_cast<double>(PayloadBytes(DenseSegments(n)));
  const double down_ratio = st.rounds_closed ? dense * st.rounds_closed / st.bytes_down : 0.0;
  const ModelSnapshot snap = engine.Snapshot();
  if (!absl::GetFlag(FLAGS_save_final).empty() &&
      !WriteFile(absl::GetFlag(FLAGS_save_final), snap.params->data(), snap.params->size() * sizeof(float))) {
    std::fprintf(stderr, "muloco-server: cannot write --save_final\n");
    return 1;
  }
  Logf("server",
       "summary: %llu rounds closed, %llu pushes, up %llu bytes (%.1fx smaller than dense fp32), down %llu "
       "bytes per worker (%.1fx smaller), "
       "rejected: %llu unknown worker, %llu wrong round, %llu duplicate, %llu bad payload; evictions %llu; "
       "final checksum %016llx",
       (unsigned long long)st.rounds_closed, (unsigned long long)st.pushes_accepted,
       (unsigned long long)st.bytes_up, st.bytes_up ? dense * st.pushes_accepted / st.bytes_up : 0.0,
       (unsigned long long)st.bytes_down, down_ratio, (unsigned long long)st.rejected_unknown_worker,
       (unsigned long long)st.rejected_wrong_round, (unsigned long long)st.rejected_duplicate,
       (unsigned long long)st.rejected_bad_payload, (unsigned long long)st.evictions,
       (unsigned long long)snap.checksum);
  return 0;
}
