// What a worker is told to do, by its flags (worker/main.cc) or by a test: where the server
// and the data are, how it retries, where it trains. RunWorker (session.h) takes it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/tls.h"
#include "worker/device.h"

namespace muloco {

struct WorkerOptions {
  std::string server = "localhost:7070";  // aggregation server address
  std::string name;                        // label in server logs (default: hostname:pid)
  std::string data;                        // corpus: directory/text file or .bin tokens
  std::string val_data;                    // optional .bin validation tokens
  double heartbeat_s = 5;                  // heartbeat period while training
  double connect_timeout_s = 60;           // keep retrying the first Join while the server is unavailable
  double retry_timeout_s = 600;            // later: ride out outages (server restart, cut link) this long
  std::string save_final;                  // write final parameters (raw fp32) here
  // At the run's evaluation rounds, write the public model into this directory (evaluate.h)
  // instead of evaluating it here: keeps evaluation out of the training's time.
  std::string defer_eval;
  uint64_t leave_after = 0;                // leave after contributing this many rounds (0: stay to the end)
  // On a stop signal, push the steps trained since the last push before leaving, letting an
  // exchange in flight land for at most this long first (0: drop them and leave at once).
  double leave_timeout_s = 30;
  std::string metrics_listen;              // serve Prometheus metrics here ("host:port"; empty: off)
  ClientTls tls;                           // transport security (TLS unless tls.insecure)
  std::string tls_server_name;             // name the server's certificate must carry (empty: --server's host)
  std::string token_file;                  // file holding the join token (empty: none, for open-join servers)
  double stall_timeout_s = 120;            // a fetch or push moving no chunk this long is cancelled and retried
  size_t chunk_bytes = 1 << 20;            // bytes per pushed chunk
  uint32_t fault_nonfinite_rounds = 0;     // fault injection (tests): the first N updates get a NaN
  // Train the next round while the last one is pushed, aggregated and sent back; rebase onto
  // the new public model when it arrives (communication hidden behind compute).
  bool overlap = false;
  uint32_t overlap_steps = 0;              // overlap: apply the update after exactly this many steps (0: on arrival)
  // Crash resume: the local training is saved to this file every state_every_s and resumed
  // from it by a worker restarted on it (session.cc; empty: off).
  std::string state_file;
  double state_every_s = 30;
  double progress_s = 30;                  // log a progress line this often while a round trains (0: never)
  double slowdown = 1;                     // a throttle (tests, benches): after each inner step, sleep
                                           // (slowdown - 1) x that step's time
  // A fresh run's initial model is a function of the run config (common/model_layout.h:
  // InitParams): build it here instead of fetching it, when its checksum is the server's.
  bool init_from_seed = true;
  ComputeDevice device;                    // where training, error feedback and the uplink encoder run
  // Set by main's SIGTERM/SIGINT handler to the signal's number (null: never stops). Once
  // nonzero the worker pushes the round in progress (leave_timeout_s), sends Leave and exits 0.
  const std::atomic<int>* stop_signal = nullptr;
};

}  // namespace muloco
