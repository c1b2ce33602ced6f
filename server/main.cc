// muloco-server: the aggregation server. Flags -> Options, then serve until the run ends
// (and every worker has left, or --linger_s passes) or SIGINT/SIGTERM arrives.
#include <grpcpp/health_check_service_interface.h>
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
ABSL_FLAG(std::string, metrics_listen, "",
          "Serve Prometheus metrics at http://ADDRESS/metrics, e.g. 0.0.0.0:9090 (port 0 picks one; empty: off)");

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

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
  if (!(eo.round_timeout_s > 0) || !(eo.heartbeat_timeout_s > 0) || absl::GetFlag(FLAGS_chunk_bytes) < 4) {
    std::fprintf(stderr, "muloco-server: need round_timeout_s > 0, heartbeat_timeout_s > 0, chunk_bytes >= 4\n");
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
  ServiceOptions so{absl::GetFlag(FLAGS_chunk_bytes),
                    std::max(PayloadBytes(uplink), PayloadBytes(DenseSegments(n)))};
  MulocoService service(&engine, config, so);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
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
      [&] { return ServerMetrics(engine.Stats(), service.Wire(), dense_bytes); }, &metrics_failed);
  if (metrics_failed) return 1;
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);

  double done_since = -1;
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    engine.Tick();
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
