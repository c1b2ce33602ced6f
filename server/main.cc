// muloco-server: the aggregation server. Flags -> ServerOptions, then RunServer
// (server/run_server.h) until the run ends or SIGINT/SIGTERM arrives; SIGHUP re-reads the
// join tokens.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "common/cli.h"
#include "common/run_config_flags.h"
#include "server/run_server.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7070", "Address to serve on (port 0 picks a free port)");
ABSL_FLAG(std::string, port_file, "", "If set, write the bound port here once serving");
ABSL_FLAG(uint32_t, min_quorum, 1, "Pushes required before a round may close");
ABSL_FLAG(uint32_t, outer_momentum_every, 1,
          "--sync=async: Delayed Nesterov: the outer momentum takes in the mean of every N rounds' updates "
          "(each round applies lr x its update / N); 1: the momentum moves every round");
ABSL_FLAG(uint64_t, max_staleness, 4, "--sync=async: versions a push may lag the open round (older: the worker fetches the model)");
ABSL_FLAG(double, grace_min_s, 0.05, "--sync=async: a round closes at the quorum and a grace window of 2x the median gap "
          "between the latest pushes, at least this long");
ABSL_FLAG(double, grace_max_s, 30, "--sync=async: the grace window's upper bound");
ABSL_FLAG(bool, async_partial_steps, true,
          "--sync=async: an outer step scales by the share of a full round it merged (its pushes / the workers "
          "that pushed within the last --max_staleness + 1 rounds; at most 1)");
ABSL_FLAG(bool, adaptive_h, false,
          "Tell each worker how many inner steps to take (at most --inner_steps) so that workers of different "
          "speeds arrive together: H x the median of the participants' seconds per step / its own, H when "
          "within 20%; pushes weigh by their steps, capped at what the worker was told");
ABSL_FLAG(uint32_t, min_inner_steps, 1, "--adaptive_h: the fewest inner steps a worker is told");
ABSL_FLAG(double, round_timeout_s, 120, "Once half the expected workers pushed, wait this many seconds at most for the rest (and 4x this after the first push)");
ABSL_FLAG(double, heartbeat_timeout_s, 30, "Evict a worker silent for this many seconds");
ABSL_FLAG(uint32_t, chunk_bytes, 1 << 20, "Bytes per streamed chunk");
ABSL_FLAG(double, linger_s, 30, "After the final round, keep serving until all workers leave, or none has been heard from (call, heartbeat, transfer) for this long");
ABSL_FLAG(std::string, init_model, "",
          "Start the run from this safetensors file: its tensors' names, shapes and values are the model (theta_0) "
          "that Python workers train (muloco's Python package); without it, the built-in GPT of the run-config flags");
ABSL_FLAG(std::string, adamw_params, muloco::kDefaultAdamwParams,
          "Muon takes the 2-D tensors whose names do not match this regular expression (ECMAScript, searched); "
          "the rest, AdamW (1-D tensors without weight decay). The default names transformer embeddings and heads");
ABSL_FLAG(std::string, checkpoint_dir, "", "Checkpoint here and resume from the newest good checkpoint on start");
ABSL_FLAG(uint32_t, checkpoint_every, 1, "Rounds between checkpoints (also on the final round and on SIGTERM)");
ABSL_FLAG(uint32_t, keep_checkpoints, 3, "Checkpoints kept (the newest)");
ABSL_FLAG(std::string, save_final, "", "If set, write the final public parameters (raw fp32) here");
ABSL_FLAG(std::string, export, "",
          "If set, write the public model here as safetensors (tensor names of common/model_layout), at the end "
          "and with every checkpoint");
ABSL_FLAG(bool, insecure, false, "Serve plaintext gRPC (no TLS): tests and local demos only");
ABSL_FLAG(std::string, tls_cert, "", "TLS: the server's certificate chain (PEM)");
ABSL_FLAG(std::string, tls_key, "", "TLS: the server's private key (PEM)");
ABSL_FLAG(std::string, tls_client_ca, "", "Mutual TLS: workers must present a certificate signed by this CA (PEM)");
ABSL_FLAG(std::string, join_tokens, "",
          "Join tokens, one 'LABEL TOKEN [weight=W]' per line ('#' comments); reloaded on change and on SIGHUP. "
          "A token removed from the file is revoked: its workers are refused at their next call. Tokens with one "
          "label are one volunteer: one vote in the mean, of weight W (default 1)");
ABSL_FLAG(bool, open_join, false, "Let anyone join without a token (public runs)");
ABSL_FLAG(std::string, robust, "clip",
          "Robust aggregation of the updates (server/screen.h): clip (per-tensor norm bounds, direction and size "
          "checks), reject (an update over a bound is left out), trimmed (coordinate-wise trimmed mean) or off");
ABSL_FLAG(double, screen_trend, -1,
          "Screening's direction check with fewer than 3 pushes in a round compares each update with the past "
          "rounds' aggregates, each older one weighing this x the next (0: last round's alone; -1: 0.5 with "
          "--sync=async, whose rounds are of few pushes, else 0)");
ABSL_FLAG(uint32_t, max_workers, 1024, "Live workers at most");
ABSL_FLAG(uint32_t, max_workers_per_token, 1,
          "Live workers per join token at most (whatever the count, a token's sessions are one vote)");
ABSL_FLAG(uint32_t, max_joins_per_minute, 600, "Joins accepted per minute, in all");
ABSL_FLAG(uint32_t, max_joins_per_token_per_minute, 60, "Joins accepted per minute, per token");
ABSL_FLAG(uint32_t, max_streams_per_worker, 4, "Streaming calls in flight per worker");
ABSL_FLAG(uint32_t, max_push_attempts_per_round, 8, "PushUpdate calls per worker per round");
ABSL_FLAG(uint32_t, max_push_chunks, 4096, "Chunks in one push");
ABSL_FLAG(double, idle_timeout_s, 60, "Cancel a stream that moves no chunk for this long");
ABSL_FLAG(double, max_await_s, 30, "One AwaitRound call waits this long at most (the worker asks again)");
ABSL_FLAG(uint32_t, transport_memory_mb, 256,
          "Memory gRPC's transport may hold for incoming data (an oversized message is cut off here)");
ABSL_FLAG(uint32_t, max_threads, 4096, "gRPC handler threads at most (further calls: RESOURCE_EXHAUSTED)");
ABSL_FLAG(uint32_t, max_connections, 1024,
          "Open client connections at most, capped before the TLS handshake; a newcomer over the cap takes the "
          "place of the connection that has sent the least, unless all have settled (joined and pushed)");
ABSL_FLAG(uint32_t, max_connections_per_address, 64,
          "Open connections per source address (IPv4 address or IPv6 /64) at most; as --max_connections");
ABSL_FLAG(std::string, metrics_listen, "",
          "Serve Prometheus metrics at http://ADDRESS/metrics, e.g. 0.0.0.0:9090 (port 0 picks one; empty: off)");

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
void OnSignal(int) { g_stop = true; }
void OnHangup(int) { g_reload = true; }

// The --sync=async knobs; false when one is out of range.
bool AsyncFromFlags(muloco::AsyncOptions* a) {
  a->max_staleness = absl::GetFlag(FLAGS_max_staleness);
  a->grace_min_s = absl::GetFlag(FLAGS_grace_min_s);
  a->grace_max_s = absl::GetFlag(FLAGS_grace_max_s);
  a->partial_steps = absl::GetFlag(FLAGS_async_partial_steps);
  a->momentum_every = absl::GetFlag(FLAGS_outer_momentum_every);
  return a->momentum_every >= 1;
}

// --robust and --screen_trend; false (with a message) when one is out of range.
bool ScreeningFromFlags(muloco::ServerOptions* o) {
  if (!muloco::ParseRobust(absl::GetFlag(FLAGS_robust), &o->robust)) {
    std::fprintf(stderr, "muloco-server: --robust must be clip, reject, trimmed or off\n");
    return false;
  }
  o->screen_trend = absl::GetFlag(FLAGS_screen_trend);
  if (!(o->screen_trend < 1)) {
    std::fprintf(stderr, "muloco-server: --screen_trend must be below 1 (-1: by mode)\n");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace muloco;
  ParseCommandLine(argc, argv,
                   "muloco-server: DiLoCo/MuLoCo aggregation server.\n"
                   "  muloco-server --listen=0.0.0.0:7070 --tls_cert=C --tls_key=K --join_tokens=F --rounds=10");
  signal(SIGINT, OnSignal);  // before anything can be told we serve
  signal(SIGTERM, OnSignal);
  signal(SIGHUP, OnHangup);
  ServerOptions o;
  o.listen = absl::GetFlag(FLAGS_listen);
  o.port_file = absl::GetFlag(FLAGS_port_file);
  o.config = RunConfigFromFlags();
  o.init_model = absl::GetFlag(FLAGS_init_model);
  o.adamw_params = absl::GetFlag(FLAGS_adamw_params);
  o.min_quorum = absl::GetFlag(FLAGS_min_quorum);
  if (!AsyncFromFlags(&o.async)) {
    std::fprintf(stderr, "muloco-server: --outer_momentum_every must be at least 1\n");
    return 2;
  }
  o.adaptive_h = absl::GetFlag(FLAGS_adaptive_h);
  o.min_inner_steps = absl::GetFlag(FLAGS_min_inner_steps);
  if (o.min_inner_steps < 1) {
    std::fprintf(stderr, "muloco-server: --min_inner_steps must be at least 1\n");
    return 2;
  }
  o.round_timeout_s = absl::GetFlag(FLAGS_round_timeout_s);
  o.heartbeat_timeout_s = absl::GetFlag(FLAGS_heartbeat_timeout_s);
  o.linger_s = absl::GetFlag(FLAGS_linger_s);
  if (!ScreeningFromFlags(&o)) return 2;
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  o.save_final = absl::GetFlag(FLAGS_save_final);
  o.export_path = absl::GetFlag(FLAGS_export);
  o.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  o.tls = ServerTls{absl::GetFlag(FLAGS_insecure), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                    absl::GetFlag(FLAGS_tls_client_ca)};
  o.auth.token_file = absl::GetFlag(FLAGS_join_tokens);
  o.auth.open_join = absl::GetFlag(FLAGS_open_join);
  o.auth.max_workers = absl::GetFlag(FLAGS_max_workers);
  o.auth.max_workers_per_token = absl::GetFlag(FLAGS_max_workers_per_token);
  o.auth.max_joins_per_minute = absl::GetFlag(FLAGS_max_joins_per_minute);
  o.auth.max_joins_per_token_per_minute = absl::GetFlag(FLAGS_max_joins_per_token_per_minute);
  o.auth.max_streams_per_worker = absl::GetFlag(FLAGS_max_streams_per_worker);
  o.auth.max_push_attempts_per_round = absl::GetFlag(FLAGS_max_push_attempts_per_round);
  o.service.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  o.service.max_push_chunks = absl::GetFlag(FLAGS_max_push_chunks);
  o.service.max_await_s = absl::GetFlag(FLAGS_max_await_s);
  o.service.idle_timeout_s = absl::GetFlag(FLAGS_idle_timeout_s);
  o.transport_memory_mb = absl::GetFlag(FLAGS_transport_memory_mb);
  o.max_threads = absl::GetFlag(FLAGS_max_threads);
  o.max_connections = absl::GetFlag(FLAGS_max_connections);
  o.max_connections_per_address = absl::GetFlag(FLAGS_max_connections_per_address);
  return RunServer(std::move(o), &g_stop, &g_reload);
}
