// Subword tokenizers through Debian's libsentencepiece: training a BPE model on a text file,
// encoding and decoding. The library's header declares its own absl::string_view, which
// clashes with Abseil's, so only worker/sentencepiece.cc includes it and this interface uses
// the standard library alone: errors are returned as text ("" on success).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace muloco {

class SentencePiece {
 public:
  SentencePiece();
  ~SentencePiece();

  // Trains a byte-fallback BPE model of `vocab_size` pieces on `text_file` (one sentence per
  // line) and writes `model_prefix`.model (and .vocab). Identity normalisation, whitespace
  // kept, so Decode(Encode(text)) == text for any UTF-8 text.
  static std::string TrainBpe(const std::string& text_file, int vocab_size, const std::string& model_prefix,
                              int threads);

  std::string Load(const std::string& model_path);
  std::string Encode(const std::string& text, std::vector<int>* ids) const;
  std::string Decode(const std::vector<int>& ids, std::string* text) const;
  int vocab_size() const;
  int eos_id() const;  // the end-of-document token (-1: none)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace muloco
