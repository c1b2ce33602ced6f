// RunBaseline (see baseline.h).
#include "worker/baseline.h"

#include <chrono>
#include <cstdio>
#include <vector>

#include "common/file_io.h"
#include "common/log.h"
#include "common/model_layout.h"
#include "common/run_config.h"
#include "worker/data.h"
#include "worker/trainer.h"

namespace muloco {

int RunBaseline(const v1::RunConfig& config, const WorkerOptions& o) {
  absl::StatusOr<Corpus> corpus =
      LoadCorpus(o.data, o.val_data, config.model().vocab_size(), config.model().context(),
                 config.model().tokenizer_checksum());
  if (!corpus.ok()) {
    std::fprintf(stderr, "muloco-worker: data: %s\n", corpus.status().ToString().c_str());
    return 1;
  }
  Logf("baseline", "%s; data %s; device %s", DescribeRunConfig(config).c_str(), corpus->description.c_str(),
       o.device.Name().c_str());
  Trainer trainer(config, &*corpus, config.data_seed(), o.device);
  std::vector<float> params = InitParams(config.model(), BuiltinLayout(config.model()));
  trainer.SetParams(params.data());
  double first_val = -1, last_val = -1;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t r = 0; r <= config.total_rounds(); ++r) {
    if (r == config.total_rounds() || (config.eval_every() && r % config.eval_every() == 0)) {
      trainer.GetParams(params.data());
      last_val = trainer.Evaluate(params.data());
      if (first_val < 0) first_val = last_val;
      Logf("baseline", "eval: round %llu val_loss %.4f", static_cast<unsigned long long>(r), last_val);
    }
    if (r == config.total_rounds()) break;
    double loss = 0;
    for (uint32_t h = 0; h < config.inner_steps(); ++h) loss += trainer.InnerStep(r * config.inner_steps() + h);
    Logf("baseline", "round %llu: train_loss %.4f", static_cast<unsigned long long>(r), loss / config.inner_steps());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double tokens = static_cast<double>(config.total_rounds()) * config.inner_steps() * config.batch_size() *
                        config.model().context();
  trainer.GetParams(params.data());
  if (absl::Status s = o.save_final.empty() ? absl::OkStatus() : WriteFloatsAtomic(o.save_final, params); !s.ok()) {
    LogError("baseline", "%s", s.ToString().c_str());
    return 1;
  }
  Logf("baseline", "final: val_loss %.4f (start %.4f), %.0f tokens/s", last_val, first_val, tokens / secs);
  return 0;
}

}  // namespace muloco
