// The aggregation server as a function: options in, a served run out. muloco-server's main
// only turns flags into ServerOptions (server/main.cc); tests and tools can call RunServer
// directly.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/tls.h"
#include "muloco/v1/muloco.pb.h"
#include "common/model_layout.h"
#include "server/auth.h"
#include "server/round_engine.h"
#include "server/screen.h"
#include "server/service.h"

namespace muloco {

struct ServerOptions {
  std::string listen = "0.0.0.0:7070";  // address to serve on (port 0 picks a free port)
  std::string port_file;                // if set, the bound port is written here once serving
  v1::RunConfig config;                 // the run (a checkpoint's replaces it on resume)
  std::string init_model;               // if set, θ₀ and the layout: a safetensors file (else the config's GPT)
  std::string adamw_params = kDefaultAdamwParams;  // 2-D tensors whose names match stay with AdamW
                                                   // (common/model_layout.h: AssignGroups)
  uint32_t min_quorum = 1;              // pushes required before a round may close
  AsyncOptions async;                   // sync async: staleness and grace bounds (enabled comes from the config)
  bool adaptive_h = false;              // tell each worker its inner steps from its speed (round_engine.h)
  uint32_t min_inner_steps = 1;         // adaptive_h: the fewest steps told
  double round_timeout_s = 120;         // once half the expected pushed, wait this long for the rest
  double heartbeat_timeout_s = 30;      // evict a worker silent this long
  double linger_s = 30;                 // after the final round, serve until all workers leave, or no
                                        // worker has been heard from (call, heartbeat, stream) for this long
  Robust robust = Robust::kClip;        // screening of pushed updates (server/screen.h)
  double screen_trend = -1;             // ScreenOptions::trend (< 0: 0.5 in async mode, else 0)
  std::string checkpoint_dir;           // checkpoint here and resume from the newest good checkpoint
  uint32_t checkpoint_every = 1;        // rounds between checkpoints (also on the final round and on stop)
  uint32_t keep_checkpoints = 3;        // newest checkpoints kept
  std::string save_final;               // if set, the final public parameters (raw fp32) go here
  std::string export_path;              // if set, the public model as safetensors, at the end and with every checkpoint
  std::string metrics_listen;           // Prometheus endpoint address (empty: off)
  ServerTls tls;                        // transport security
  AuthOptions auth;                     // join tokens, sessions, admission limits
  ServiceOptions service;               // chunking, per-call bounds (max_payload_bytes is set from the codec)
  uint32_t transport_memory_mb = 256;   // memory gRPC's transport may hold for incoming data
  uint32_t max_threads = 4096;          // gRPC handler threads at most (a waiting worker holds one)
  uint32_t max_connections = 1024;      // open connections at most, capped before TLS (server/conn_gate.h)
  uint32_t max_connections_per_address = 64;  // per IPv4 address or IPv6 /64
};

// The engine's options for this run: the codecs and the outer step from `config`, the rest
// (quorum, timeouts, screening) from the server's options.
EngineOptions EngineOptionsFor(const ServerOptions& o, const v1::RunConfig& config, const ParamLayout& layout);

// Serves until the run ends (and its workers have left, or linger_s passed) or *stop turns
// true (then a checkpoint is written); *reload re-reads the join tokens at once. Returns a
// process exit code: 0 done, 1 a runtime failure (cannot listen, cannot write), 2 bad options.
int RunServer(ServerOptions options, const std::atomic<bool>* stop, std::atomic<bool>* reload);

}  // namespace muloco
