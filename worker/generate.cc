// Sampling from an export (see generate.h).
#include "worker/generate.h"

#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/model_layout.h"
#include "common/safetensors.h"
#include "worker/language_model.h"

namespace muloco {

absl::StatusOr<v1::ModelSpec> SpecFromExport(const std::map<std::string, std::string>& meta) {
  auto field = [&](const char* key, uint64_t* out) {
    auto it = meta.find(key);
    return it != meta.end() && absl::SimpleAtoi(it->second, out);
  };
  auto format = meta.find("format");
  if (format == meta.end() || (format->second != "muloco-gpt" && format->second != "muloco-llama")) {
    return absl::InvalidArgumentError("not a built-in model's export (metadata format muloco-gpt or muloco-llama)");
  }
  v1::ModelSpec s;
  uint64_t v[5];
  const char* keys[] = {"vocab_size", "n_layer", "n_head", "d_model", "context"};
  for (int i = 0; i < 5; ++i) {
    if (!field(keys[i], &v[i])) return absl::InvalidArgumentError(absl::StrCat("export metadata lacks ", keys[i]));
  }
  s.set_vocab_size(v[0]);
  s.set_n_layer(v[1]);
  s.set_n_head(v[2]);
  s.set_d_model(v[3]);
  s.set_context(v[4]);
  s.set_arch(format->second == "muloco-llama" ? "llama" : "gpt");
  uint64_t kv = 0, ffn = 0;
  if (s.arch() == "llama" && (!field("n_kv_head", &kv) || !field("ffn_dim", &ffn))) {
    return absl::InvalidArgumentError("export metadata lacks n_kv_head or ffn_dim");
  }
  if (s.arch() == "llama") {
    s.set_n_kv_head(kv);
    s.set_ffn_dim(ffn);
    auto tie = meta.find("tie_embeddings");
    s.set_tie_embeddings(tie != meta.end() && tie->second == "true");
  }
  uint64_t tokenizer = 0;  // absent: bytes
  if (meta.count("tokenizer_checksum") && !field("tokenizer_checksum", &tokenizer)) {
    return absl::InvalidArgumentError("export metadata: tokenizer_checksum is not a number");
  }
  s.set_tokenizer_checksum(tokenizer);
  if (absl::Status st = ValidateModelSpec(s); !st.ok()) return st;
  return s;
}

absl::StatusOr<std::vector<int64_t>> Generate(const std::string& model_path, const std::vector<int64_t>& prompt,
                                              const GenerateOptions& o) {
  absl::StatusOr<std::string> bytes = ReadFile(model_path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<SafetensorsModel> file = ParseSafetensors(*bytes);
  if (!file.ok()) return file.status();
  absl::StatusOr<v1::ModelSpec> spec = SpecFromExport(file->metadata);
  if (!spec.ok()) return spec.status();
  if (std::string d = LayoutDifference(BuiltinLayout(*spec), file->layout); !d.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(model_path, ": not the model its metadata states: ", d));
  }
  if (spec->tokenizer_checksum() != o.tokenizer_checksum) {
    return absl::InvalidArgumentError(
        spec->tokenizer_checksum() == 0
            ? std::string("the model reads bytes: give the prompt as text, without a tokenizer")
            : o.tokenizer_checksum == 0
                  ? absl::StrCat("the model reads the tokens of tokenizer ", spec->tokenizer_checksum(),
                                 ": give the prompt as ids with that --tokenizer (scripts/sample.sh EXPORT SHARDS_DIR)")
                  : absl::StrCat("the model was trained on tokenizer ", spec->tokenizer_checksum(), ", not ",
                                 o.tokenizer_checksum, " (--tokenizer)"));
  }
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (int64_t t : prompt) {
    if (t < 0 || t >= spec->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", t, " is outside the vocabulary of ", spec->vocab_size()));
    }
  }
  std::unique_ptr<LanguageModel> model = MakeLanguageModel(*spec);
  model->LoadFlat(file->params.data());  // the export's data order is the layout's
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  std::vector<int64_t> out = prompt;
  for (size_t i = 0; i < o.tokens; ++i) {
    const size_t start = out.size() > spec->context() ? out.size() - spec->context() : 0;
    const torch::Tensor idx = torch::tensor(std::vector<int64_t>(out.begin() + start, out.end())).unsqueeze(0);
    const torch::Tensor last = model->Logits(idx)[0][-1];
    const torch::Tensor next = o.temperature <= 0 ? last.argmax()
                                                  : torch::multinomial(torch::softmax(last / o.temperature, -1), 1,
                                                                       /*replacement=*/false, gen);
    out.push_back(next.item<int64_t>());
  }
  return out;
}

}  // namespace muloco
