// train_speed: tokens per second of one worker's inner loop (Trainer::InnerStep: forward,
// backward, clipping, AdamW) for the demo model on the fortunes corpus, and the bytes one
// worker sends and receives per round. bench/run.sh sets it beside bench/torch_eager_gpt.py.
//
//   train_speed [--steps=30] [--threads=1] [--warmup=3] [--data=PATH] [--device=cpu|cuda]
//               [--dtype=fp32|bf16] [run-config flags]
//
// The run-config flags (the server's: --uplink_codec=quant:bits=2, --batch_size, ...) default
// to DefaultRunConfig(), the demo run.
//
// Besides the human-readable lines it prints `muloco_<name> <value>` lines for scripts.
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/cli.h"
#include "codec/codec.h"
#include "common/model_layout.h"
#include "common/run_config.h"
#include "common/run_config_flags.h"
#include "worker/data.h"
#include "worker/device.h"
#include "worker/trainer.h"

ABSL_FLAG(int32_t, steps, 30, "Timed inner steps");
ABSL_FLAG(int32_t, warmup, 3, "Untimed inner steps before timing");
ABSL_FLAG(int32_t, threads, 1, "LibTorch intra-op threads");
ABSL_FLAG(std::string, data, muloco::kDefaultCorpus, "Corpus: a text directory or file, or a .bin token file");
ABSL_FLAG(std::string, device, "cpu", "cpu, cuda, cuda:N or auto (as muloco-worker --device)");
ABSL_FLAG(std::string, dtype, "fp32", "fp32, or bf16 autocast on CUDA");

namespace {

using namespace muloco;
using Clock = std::chrono::steady_clock;

struct Timing {
  int threads = 1, warmup = 0, steps = 1;
  double first_loss = 0, last_loss = 0, seconds = 0;
};

// Steps count from 0 so the schedule's warmup is exercised exactly as in a real run.
void TimeSteps(Trainer* trainer, Timing* t) {
  uint64_t step = 0;
  for (int i = 0; i < t->warmup; ++i, ++step) {
    const double loss = trainer->InnerStep(step);
    if (i == 0) t->first_loss = loss;
  }
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < t->steps; ++i, ++step) t->last_loss = trainer->InnerStep(step);
  t->seconds = std::chrono::duration<double>(Clock::now() - start).count();
}

void PrintReport(const v1::RunConfig& config, const std::string& corpus, const ComputeDevice& device, const Timing& t) {
  const v1::ModelSpec& spec = config.model();
  const ParamLayout layout = BuiltinLayout(spec);
  const size_t n = TotalParams(layout);
  const double tokens = static_cast<double>(config.batch_size()) * spec.context() * t.steps;
  const double tokens_per_s = tokens / t.seconds;
  // Exact payload sizes for the run's codecs (validated by the caller), headers included.
  const std::vector<TensorShape> shapes = CodecShapes(layout);
  const uint64_t up = PayloadBytes(PlanSegments(shapes, *ParseCodec(config.uplink_codec())));
  const uint64_t down = PayloadBytes(PlanSegments(shapes, *ParseCodec(config.downlink_codec())));
  const uint64_t dense = PayloadBytes(DenseSegments(n));

  std::printf("model: %s\n", DescribeRunConfig(config).c_str());
  std::printf("corpus: %s\n", corpus.c_str());
  std::printf("params: %zu, device %s, threads: %d, warmup steps: %d, timed steps: %d\n", n, device.Name().c_str(),
              t.threads, t.warmup, t.steps);
  std::printf("loss: %.4f (first warmup step) -> %.4f (last timed step)\n", t.first_loss, t.last_loss);
  std::printf("inner loop: %.3f s for %.0f tokens = %.0f tokens/s (%.2f ms/step)\n", t.seconds, tokens, tokens_per_s,
              1e3 * t.seconds / t.steps);
  // Payload bytes, headers included; gRPC/HTTP2 framing of the streamed chunks comes on top.
  std::printf("per round per worker: up %llu bytes (%s; dense fp32 is %.2fx that), down %llu bytes (%s; %.2fx)\n",
              static_cast<unsigned long long>(up), config.uplink_codec().c_str(), static_cast<double>(dense) / up,
              static_cast<unsigned long long>(down), config.downlink_codec().c_str(), static_cast<double>(dense) / down);
  std::printf("muloco_threads %d\n", t.threads);
  std::printf("muloco_params %zu\n", n);
  std::printf("muloco_tokens_per_s %.0f\n", tokens_per_s);
  std::printf("muloco_step_ms %.3f\n", 1e3 * t.seconds / t.steps);
  std::printf("muloco_uplink_codec %s\n", config.uplink_codec().c_str());
  std::printf("muloco_downlink_codec %s\n", config.downlink_codec().c_str());
  std::printf("muloco_bytes_up_per_round %llu\n", static_cast<unsigned long long>(up));
  std::printf("muloco_bytes_down_per_round %llu\n", static_cast<unsigned long long>(down));
  std::printf("muloco_bytes_dense_fp32 %llu\n", static_cast<unsigned long long>(dense));
}

int Fail(int rc, const absl::Status& s) {
  std::fprintf(stderr, "train_speed: %s\n", std::string(s.message()).c_str());
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  ParseCommandLine(argc, argv, "train_speed: inner-loop tokens/s of the demo model and bytes per round.");
  Timing t;
  t.steps = absl::GetFlag(FLAGS_steps);
  t.warmup = absl::GetFlag(FLAGS_warmup);
  t.threads = absl::GetFlag(FLAGS_threads);
  if (t.steps < 1 || t.warmup < 0 || t.threads < 1) {
    return Fail(2, absl::InvalidArgumentError("--steps and --threads must be >= 1, --warmup >= 0"));
  }
  at::set_num_threads(t.threads);
  const v1::RunConfig config = RunConfigFromFlags();
  if (absl::Status s = ValidateRunConfig(config); !s.ok()) return Fail(2, s);
  const v1::ModelSpec& spec = config.model();
  absl::StatusOr<Corpus> corpus = LoadCorpus(absl::GetFlag(FLAGS_data), "", spec.vocab_size(), spec.context());
  if (!corpus.ok()) return Fail(1, corpus.status());
  absl::StatusOr<ComputeDevice> device = ResolveDevice(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_dtype), nullptr);
  if (!device.ok()) return Fail(2, device.status());
  Trainer trainer(config, &*corpus, config.data_seed(), *device);
  trainer.SetParams(InitParams(spec, BuiltinLayout(spec)).data());
  TimeSteps(&trainer, &t);
  PrintReport(config, corpus->description, *device, t);
  return 0;
}
