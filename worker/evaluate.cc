// DeferredEvalPath, ConfigBeside and RunEvaluate (see evaluate.h).
#include "worker/evaluate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/model_layout.h"
#include "common/run_config.h"
#include "worker/data.h"
#include "worker/trainer.h"

namespace muloco {

namespace {

// The files in directory `dir` named PREFIX*.bin, in name order.
std::vector<std::string> BinFiles(const std::string& dir, const std::string& prefix, std::error_code& ec) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0 && e.path().extension() == ".bin") {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The files `path` names: itself, or a directory's *.bin files in name order.
absl::StatusOr<std::vector<std::string>> ModelFiles(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return std::vector<std::string>{path};
  std::vector<std::string> files = BinFiles(path, "", ec);
  if (ec) return absl::UnavailableError(absl::StrCat(path, ": ", ec.message()));
  if (files.empty()) return absl::NotFoundError(absl::StrCat(path, ": no .bin files"));
  return files;
}

// The raw fp32 model in `path`, checked to be `n` finite values.
absl::StatusOr<std::vector<float>> ReadModel(const std::string& path, size_t n) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() != n * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes->size(), " bytes, but this run config's model has ",
                                                   n, " parameters (", n * sizeof(float),
                                                   " bytes of raw fp32): not a model of this run configuration "
                                                   "(its --config, or the run's flags)"));
  }
  std::vector<float> params(n);
  std::memcpy(params.data(), bytes->data(), bytes->size());
  if (!std::all_of(params.begin(), params.end(), [](float v) { return std::isfinite(v); })) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds non-finite values"));
  }
  return params;
}

}  // namespace

std::string DeferredEvalPath(const std::string& dir, uint64_t round) {
  return absl::StrFormat("%s/round-%06d.bin", dir, round);
}

std::vector<std::string> DeferredModels(const std::string& dir) {
  std::error_code ec;  // a missing directory holds none
  return BinFiles(dir, "round-", ec);
}

std::string DeferredConfigPath(const std::string& dir) { return dir + "/run_config.txtpb"; }

absl::StatusOr<std::string> ConfigBeside(const std::vector<std::string>& paths) {
  std::string found, found_text;
  for (const std::string& path : paths) {
    std::error_code ec;
    const std::string dir =
        std::filesystem::is_directory(path, ec) ? path : std::filesystem::path(path).parent_path().string();
    const std::string candidate = DeferredConfigPath(dir.empty() ? "." : dir);
    if (!std::filesystem::exists(candidate, ec)) continue;
    absl::StatusOr<std::string> text = ReadFile(candidate);
    if (!text.ok()) return absl::UnavailableError(absl::StrCat(candidate, ": cannot read it"));
    if (found.empty()) {
      found = candidate;
      found_text = *std::move(text);
    } else if (*text != found_text) {
      return absl::InvalidArgumentError(absl::StrCat(found, " and ", candidate, " are different runs' configurations: "
                                                     "evaluate their models in separate calls"));
    }
  }
  return found;
}

int RunEvaluate(const v1::RunConfig& config, const WorkerOptions& o, const std::vector<std::string>& paths) {
  if (config.eval_batches() == 0) {
    std::fprintf(stderr, "muloco-worker: --evaluate needs --eval_batches >= 1\n");
    return 2;
  }
  absl::StatusOr<Corpus> corpus = LoadCorpus(o.data, o.val_data, config.model().vocab_size(),
                                             config.model().context(), config.model().tokenizer_checksum());
  if (!corpus.ok()) {
    std::fprintf(stderr, "muloco-worker: data: %s\n", corpus.status().ToString().c_str());
    return 1;
  }
  Logf("evaluate", "%s; data %s; %u validation batches", DescribeRunConfig(config).c_str(),
       corpus->description.c_str(), config.eval_batches());
  Trainer trainer(config, &*corpus, config.data_seed(), o.device);
  const size_t n = TotalParams(BuiltinLayout(config.model()));
  bool failed = false;
  for (const std::string& path : paths) {
    absl::StatusOr<std::vector<std::string>> files = ModelFiles(path);
    if (!files.ok()) {
      std::fprintf(stderr, "muloco-worker: %s\n", std::string(files.status().message()).c_str());
      failed = true;
      continue;
    }
    for (const std::string& file : *files) {
      absl::StatusOr<std::vector<float>> params = ReadModel(file, n);
      if (!params.ok()) {
        std::fprintf(stderr, "muloco-worker: %s\n", std::string(params.status().message()).c_str());
        failed = true;
        continue;
      }
      std::printf("%s val_loss %.4f\n", file.c_str(), trainer.Evaluate(params->data()));
      std::fflush(stdout);
    }
  }
  return failed ? 1 : 0;
}

}  // namespace muloco
