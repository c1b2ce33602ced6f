// SentencePiece (see sentencepiece.h). No Abseil header may be included here.
#include "worker/sentencepiece.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace muloco {

struct SentencePiece::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SentencePiece::SentencePiece() : impl_(std::make_unique<Impl>()) {}
SentencePiece::~SentencePiece() = default;

std::string SentencePiece::TrainBpe(const std::string& text_file, int vocab_size, const std::string& model_prefix,
                                    int threads) {
  const std::string args = "--input=" + text_file + " --model_prefix=" + model_prefix +
                           " --vocab_size=" + std::to_string(vocab_size) +
                           " --model_type=bpe --byte_fallback=true --character_coverage=1.0"
                           " --normalization_rule_name=identity --remove_extra_whitespaces=false"
                           " --split_digits=true --max_sentence_length=16384 --minloglevel=1"
                           " --num_threads=" + std::to_string(threads);
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  return status.ok() ? "" : status.ToString();
}

std::string SentencePiece::Load(const std::string& model_path) {
  const auto status = impl_->sp.Load(model_path);
  return status.ok() ? "" : status.ToString();
}

std::string SentencePiece::Encode(const std::string& text, std::vector<int>* ids) const {
  const auto status = impl_->sp.Encode(text, ids);
  return status.ok() ? "" : status.ToString();
}

std::string SentencePiece::Decode(const std::vector<int>& ids, std::string* text) const {
  const auto status = impl_->sp.Decode(ids, text);
  return status.ok() ? "" : status.ToString();
}

int SentencePiece::vocab_size() const { return impl_->sp.GetPieceSize(); }

int SentencePiece::eos_id() const { return impl_->sp.eos_id(); }

}  // namespace muloco
