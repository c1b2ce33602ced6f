// muloco-worker: trains with an aggregation server (--server), or alone (--baseline) with
// the run-config flags, or evaluates saved models (--evaluate). Flags -> WorkerOptions;
// everything else lives in session.cc, baseline.cc and evaluate.cc.
#include <ATen/Parallel.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cli.h"
#include "common/file_io.h"
#include "common/run_config.h"
#include "common/log.h"
#include "common/run_config_flags.h"
#include "common/token_shards.h"
#include "worker/baseline.h"
#include "worker/evaluate.h"
#include "worker/generate.h"
#include "worker/session.h"

ABSL_FLAG(std::string, server, "localhost:7070", "Aggregation server address (host:port)");
ABSL_FLAG(std::string, name, "", "Worker label in server logs (default: worker-PID)");
ABSL_FLAG(std::string, data, "",
          "Corpus: a text directory or file, a nanoGPT .bin token file, or a muloco-prepare shard directory "
          "(default: fortunes)");
ABSL_FLAG(std::string, val_data, "", "Validation .bin token file (default: last 10% of --data)");
ABSL_FLAG(double, heartbeat_s, 5, "Seconds between heartbeats");
ABSL_FLAG(double, connect_timeout_s, 60, "Keep retrying to join an unavailable server this long");
ABSL_FLAG(double, retry_timeout_s, 600, "Keep retrying an unavailable server this long (restarts, cut links)");
ABSL_FLAG(uint64_t, leave_after, 0, "Leave after contributing this many rounds (0: stay to the end of the run)");
ABSL_FLAG(double, leave_timeout_s, 30,
          "On SIGTERM/SIGINT, push the steps trained since the last push before leaving, letting the exchange in "
          "flight land for at most this long first (0: drop them and leave at once; a second signal always does)");
ABSL_FLAG(std::string, save_final, "", "If set, write the final parameters (raw fp32) here");
ABSL_FLAG(int32_t, threads, 1, "LibTorch intra-op threads");
ABSL_FLAG(std::string, metrics_listen, "",
          "Serve Prometheus metrics at http://ADDRESS/metrics, e.g. 0.0.0.0:9091 (port 0 picks one; empty: off)");
ABSL_FLAG(bool, insecure, false, "Connect in plaintext (no TLS): tests and local demos only");
ABSL_FLAG(std::string, tls_ca, "", "TLS: CA certificate (PEM) that signed the server's (default: the system's roots)");
ABSL_FLAG(std::string, tls_cert, "", "Mutual TLS: this worker's certificate (PEM)");
ABSL_FLAG(std::string, tls_key, "", "Mutual TLS: this worker's private key (PEM)");
ABSL_FLAG(std::string, tls_server_name, "", "Check the server's certificate for this name (default: --server's host)");
ABSL_FLAG(double, stall_timeout_s, 120,
          "Cancel and retry a model fetch or push that moves no chunk for this long (deadlines follow progress, "
          "not wall time: a slow link is fine, a dead one is not)");
ABSL_FLAG(uint32_t, chunk_bytes, 1 << 20, "Bytes per pushed chunk (keep chunk / link rate well under --stall_timeout_s)");
ABSL_FLAG(std::string, token_file, "", "File holding this worker's join token (first line)");
ABSL_FLAG(uint32_t, fault_nonfinite_rounds, 0, "Fault injection for tests: make the first N updates non-finite");
ABSL_FLAG(bool, baseline, false, "Train alone, without a server, using the run-config flags");
ABSL_FLAG(std::vector<std::string>, evaluate, {},
          "Evaluate saved models (raw fp32 from --save_final or --defer_eval; a directory: its .bin files) as models "
          "of their run, print 'PATH val_loss X' for each, and exit. Their run's configuration: --config if given, else "
          "the run_config.txtpb that --defer_eval wrote beside them; run-config flags override either");
ABSL_FLAG(std::string, defer_eval, "",
          "At the run's evaluation rounds, write the public model to DIR/round-NNNNNN.bin instead of evaluating it "
          "and the run's configuration to DIR/run_config.txtpb (evaluate later with --evaluate=DIR): keeps "
          "evaluation out of the training's time. One directory per worker. The final model is written and "
          "evaluated; the summary's first val_loss is then the final one");
ABSL_FLAG(bool, overlap, false,
          "Train the next round while the last one is pushed, aggregated and sent back; rebase onto the new "
          "global model when it arrives (hides communication behind compute; not for SignMuon)");
ABSL_FLAG(uint32_t, overlap_steps, 0,
          "With --overlap: apply the round's update after exactly this many steps of the next round, waiting for "
          "it there if it is late (reproducible runs); 0: as soon as it arrives");
ABSL_FLAG(std::string, device, "auto",
          "Where to train and compress: cpu, cuda, cuda:N, or auto (CUDA when usable, else the CPU)");
ABSL_FLAG(std::string, dtype, "fp32", "Forward/backward precision: fp32, or bf16 (autocast on CUDA; fp32 master weights)");
ABSL_FLAG(double, slowdown, 1,
          "Throttle for tests and benches: after each inner step sleep (slowdown - 1) x its time (a worker this many "
          "times slower)");
ABSL_FLAG(std::string, state_file, "",
          "Save this worker's local training (parameters, optimizer state, its progress since the last push) to "
          "this file every --state_every_s; a worker restarted after a crash resumes the steps saved there, "
          "rebased onto the server's current model (async runs; a synchronous run only within the same round). "
          "One file per worker; removed when the run ends");
ABSL_FLAG(double, state_every_s, 30, "--state_file: seconds between saves (a crash loses at most this much training)");
ABSL_FLAG(double, progress_s, 30, "Log a progress line this often while a round trains (0: never)");
ABSL_FLAG(bool, init_from_seed, true,
          "Joining a fresh run (round 0): build the initial model from the run's init_seed instead of fetching it, "
          "when its checksum is the server's (saves a dense model transfer per worker; the build is single-threaded, "
          "tens of seconds for 1B parameters); false: always fetch");
ABSL_FLAG(std::string, generate, "",
          "Sample text from an export (muloco-server --export) and exit: --prompt (bytes) or --prompt_ids "
          "(subword ids, as scripts/sample.sh gives them)");
ABSL_FLAG(std::string, prompt, "", "--generate: the prompt as text, for a byte-level model");
ABSL_FLAG(std::string, prompt_ids, "", "--generate: the prompt as space-separated token ids (printed back as ids)");
ABSL_FLAG(std::string, tokenizer, "",
          "--generate: the tokenizer.model the --prompt_ids come from (muloco-prepare's), checked against the export's");
ABSL_FLAG(uint32_t, sample_tokens, 200, "--generate: tokens to sample");
ABSL_FLAG(double, temperature, 0.8, "--generate: sampling temperature (0: greedy)");
ABSL_FLAG(uint64_t, sample_seed, 1, "--generate: sampling seed");

namespace {

// SIGTERM / SIGINT: the worker pushes what it trained since its last push (--leave_timeout_s),
// leaves the run and exits 0. The handler is one-shot
// (SA_RESETHAND), so a second signal kills the worker at once.
std::atomic<int> stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");

void OnStopSignal(int sig) { stop_signal.store(sig); }

void InstallStopHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

// Every flag's check and its WorkerOptions field; an error names the flag.
absl::StatusOr<muloco::WorkerOptions> OptionsFromFlags() {
  using namespace muloco;
  if (absl::GetFlag(FLAGS_threads) < 1 || !(absl::GetFlag(FLAGS_heartbeat_s) > 0) ||
      !(absl::GetFlag(FLAGS_progress_s) >= 0) || !(absl::GetFlag(FLAGS_stall_timeout_s) > 0) ||
      !(absl::GetFlag(FLAGS_leave_timeout_s) >= 0) ||
      absl::GetFlag(FLAGS_chunk_bytes) < 1024 || absl::GetFlag(FLAGS_chunk_bytes) > (4u << 20)) {
    return absl::InvalidArgumentError(
        "--threads must be >= 1, --heartbeat_s > 0, --progress_s >= 0, --stall_timeout_s > 0, --leave_timeout_s >= 0, "
        "--chunk_bytes in [1024, 4 MiB]");
  }
  WorkerOptions o;
  o.server = absl::GetFlag(FLAGS_server);
  o.name = absl::GetFlag(FLAGS_name);
  o.data = absl::GetFlag(FLAGS_data);
  o.val_data = absl::GetFlag(FLAGS_val_data);
  o.heartbeat_s = absl::GetFlag(FLAGS_heartbeat_s);
  o.connect_timeout_s = absl::GetFlag(FLAGS_connect_timeout_s);
  o.save_final = absl::GetFlag(FLAGS_save_final);
  o.defer_eval = absl::GetFlag(FLAGS_defer_eval);
  o.retry_timeout_s = absl::GetFlag(FLAGS_retry_timeout_s);
  o.leave_after = absl::GetFlag(FLAGS_leave_after);
  o.leave_timeout_s = absl::GetFlag(FLAGS_leave_timeout_s);
  o.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  o.tls = ClientTls{absl::GetFlag(FLAGS_insecure), absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                    absl::GetFlag(FLAGS_tls_key)};
  o.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  o.token_file = absl::GetFlag(FLAGS_token_file);
  o.stall_timeout_s = absl::GetFlag(FLAGS_stall_timeout_s);
  o.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  o.fault_nonfinite_rounds = absl::GetFlag(FLAGS_fault_nonfinite_rounds);
  o.progress_s = absl::GetFlag(FLAGS_progress_s);
  o.overlap = absl::GetFlag(FLAGS_overlap);
  o.init_from_seed = absl::GetFlag(FLAGS_init_from_seed);
  o.overlap_steps = absl::GetFlag(FLAGS_overlap_steps);
  o.slowdown = absl::GetFlag(FLAGS_slowdown);
  if (!(o.slowdown >= 1)) return absl::InvalidArgumentError("--slowdown must be at least 1");
  o.state_file = absl::GetFlag(FLAGS_state_file);
  o.state_every_s = absl::GetFlag(FLAGS_state_every_s);
  if (!(o.state_every_s > 0)) return absl::InvalidArgumentError("--state_every_s must be positive");
  std::string note;
  absl::StatusOr<ComputeDevice> device = ResolveDevice(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_dtype), &note);
  if (!device.ok()) return device.status();
  o.device = *device;
  if (!note.empty()) Logf("worker", "%s", note.c_str());
  return o;
}

// --baseline, --evaluate and --defer_eval together make sense only one way; --defer_eval's
// directory is made here.
absl::Status CheckModes(const muloco::WorkerOptions& o, bool baseline, const std::vector<std::string>& evaluate) {
  using namespace muloco;
  if (baseline && !evaluate.empty()) return absl::InvalidArgumentError("--baseline and --evaluate are two modes: give one");
  if (o.defer_eval.empty()) return absl::OkStatus();
  if (baseline || !evaluate.empty()) {
    return absl::InvalidArgumentError("--defer_eval is for a worker with a server, not --baseline or --evaluate");
  }
  if (absl::Status s = MakeDirs(o.defer_eval); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--defer_eval: ", s.message()));
  }
  if (!DeferredModels(o.defer_eval).empty()) {
    Logf("worker", "--defer_eval: %s already holds round-*.bin files (an earlier run's?); this run overwrites "
         "those of its own rounds and the run_config.txtpb that --evaluate reads for all of them",
         o.defer_eval.c_str());
  }
  return absl::OkStatus();
}

int Usage(const std::string& why) {
  std::fprintf(stderr, "muloco-worker: %s\n", why.c_str());
  return 2;
}

// --baseline (train alone) or --evaluate (saved models), with the run-config flags or, for
// --evaluate, the configuration --defer_eval wrote beside the models.
int RunWithoutServer(const muloco::WorkerOptions& o, const std::vector<std::string>& evaluate) {
  using namespace muloco;
  std::string beside;
  if (!evaluate.empty() && !FlagGiven("config")) {
    absl::StatusOr<std::string> found = ConfigBeside(evaluate);
    if (!found.ok()) return Usage(absl::StrCat("--evaluate: ", found.status().message()));
    beside = *found;
    if (!beside.empty()) Logf("evaluate", "run configuration from %s", beside.c_str());
  }
  const v1::RunConfig config = RunConfigFromFlags(beside);
  if (absl::Status s = ValidateRunConfig(config); !s.ok()) return Usage(s.ToString());
  try {
    return evaluate.empty() ? RunBaseline(config, o) : RunEvaluate(config, o, evaluate);
  } catch (const std::exception& e) {  // LibTorch reports a failing device by throwing
    std::fprintf(stderr, "muloco-worker: training failed on %s: %s\n", o.device.Name().c_str(), e.what());
    return 1;
  }
}

// --generate: the prompt's continuation, as text (--prompt) or ids (--prompt_ids).
int RunGenerate() {
  using namespace muloco;
  const std::string text = absl::GetFlag(FLAGS_prompt), ids = absl::GetFlag(FLAGS_prompt_ids);
  std::vector<int64_t> prompt;
  for (unsigned char c : text) prompt.push_back(c);
  for (absl::string_view id : absl::StrSplit(ids, ' ', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(id, &v)) return Usage(absl::StrCat("--prompt_ids: not a token id: ", id));
    prompt.push_back(v);
  }
  if (!text.empty() && !ids.empty()) return Usage("--prompt and --prompt_ids exclude each other");
  GenerateOptions go{absl::GetFlag(FLAGS_sample_tokens), absl::GetFlag(FLAGS_temperature),
                     absl::GetFlag(FLAGS_sample_seed)};
  if (const std::string tokenizer = absl::GetFlag(FLAGS_tokenizer); !tokenizer.empty()) {
    absl::StatusOr<std::string> bytes = ReadFile(tokenizer);
    if (!bytes.ok()) return Usage(absl::StrCat("--tokenizer: ", bytes.status().message()));
    go.tokenizer_checksum = TokenizerChecksum(*bytes);
  }
  absl::StatusOr<std::vector<int64_t>> out = Generate(absl::GetFlag(FLAGS_generate), prompt, go);
  if (!out.ok()) return Usage(absl::StrCat("--generate: ", out.status().message()));
  if (ids.empty()) {
    std::string bytes;
    for (int64_t t : *out) bytes.push_back(static_cast<char>(t));
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  } else {
    for (size_t i = 0; i < out->size(); ++i) std::printf("%s%lld", i ? " " : "", static_cast<long long>((*out)[i]));
  }
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace muloco;
  ParseCommandLine(argc, argv,
                   "muloco-worker: DiLoCo worker.\n"
                   "  muloco-worker --server=HOST:PORT        (everything else comes from the server)\n"
                   "  muloco-worker --baseline --rounds=10     (single process, no server)\n"
                   "  muloco-worker --evaluate=FILE|DIR,...   (validation loss of saved models of a run)\n"
                   "  muloco-worker --generate=MODEL.safetensors --prompt=TEXT   (sample from an export)");
  absl::StatusOr<WorkerOptions> o = OptionsFromFlags();
  if (!o.ok()) return Usage(std::string(o.status().message()));
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  if (!absl::GetFlag(FLAGS_generate).empty()) return RunGenerate();
  const bool baseline = absl::GetFlag(FLAGS_baseline);
  const std::vector<std::string> evaluate = absl::GetFlag(FLAGS_evaluate);
  if (absl::Status s = CheckModes(*o, baseline, evaluate); !s.ok()) return Usage(std::string(s.message()));
  if (baseline || !evaluate.empty()) return RunWithoutServer(*o, evaluate);
  InstallStopHandlers();
  o->stop_signal = &stop_signal;
  return RunWorker(*o);
}
