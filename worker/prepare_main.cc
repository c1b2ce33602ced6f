// muloco-prepare: text to token shards for a run on subwords. Trains a SentencePiece BPE
// tokenizer on the text's training documents (or takes an existing .model), encodes every
// document (the end-of-document token after each), and writes a shard directory
// (common/token_shards.h): tokenizer.model, train-NNNNN.bin, val.bin (every 10th document,
// as for bytes). Prints the flags that name the tokenizer to the server. It links no
// protobuf (see CMakeLists.txt), so it parses its flags with Abseil alone. --encode and
// --decode turn text into ids and back (scripts/sample.sh).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "common/token_shards.h"
#include "worker/data.h"
#include "worker/sentencepiece.h"

ABSL_FLAG(std::string, text, "", "Text: a file or a directory of files (default: Debian's fortunes)");
ABSL_FLAG(std::string, out, "", "Directory to write the shards and tokenizer.model into (required)");
ABSL_FLAG(int32_t, pieces, 1024, "Vocabulary size (pieces) of the BPE tokenizer to train, in [260, 65536]");
ABSL_FLAG(std::string, tokenizer, "", "An existing SentencePiece .model to use instead of training one");
ABSL_FLAG(int64_t, shard_tokens, int64_t{1} << 22, "Tokens per train shard");
ABSL_FLAG(int32_t, threads, 2, "Threads for training the tokenizer");
ABSL_FLAG(std::string, encode, "", "Print the token ids of the text on stdin under this tokenizer .model and exit");
ABSL_FLAG(std::string, decode, "", "Print the text of the token ids on stdin under this tokenizer .model and exit");

namespace muloco {
namespace {

// tokenizer.model in `out`: trained on the training documents, or a copy of --tokenizer.
absl::Status MakeTokenizer(const Documents& docs, const std::string& out) {
  const std::string model = out + "/tokenizer.model", given = absl::GetFlag(FLAGS_tokenizer);
  if (!given.empty()) {
    absl::StatusOr<std::string> bytes = ReadFile(given);
    if (!bytes.ok()) return bytes.status();
    return WriteFileAtomic(model, *bytes);
  }
  const int vocab = absl::GetFlag(FLAGS_pieces);
  if (vocab < 260 || vocab > 65536) return absl::InvalidArgumentError("--pieces must be in [260, 65536]");
  const std::string input = out + "/tokenizer-input.txt";
  std::string text;
  for (const std::string& d : docs.train) text += d;
  if (absl::Status s = WriteFileAtomic(input, text); !s.ok()) return s;
  const std::string error = SentencePiece::TrainBpe(input, vocab, out + "/tokenizer", absl::GetFlag(FLAGS_threads));
  std::remove(input.c_str());
  if (!error.empty()) return absl::InvalidArgumentError("training the tokenizer: " + error);
  return absl::OkStatus();
}

// The documents' tokens, each document followed by the end-of-document token.
absl::StatusOr<std::vector<uint16_t>> EncodeAll(const SentencePiece& sp, const std::vector<std::string>& docs) {
  std::vector<uint16_t> out;
  std::vector<int> ids;
  for (const std::string& d : docs) {
    if (std::string error = sp.Encode(d, &ids); !error.empty()) return absl::InvalidArgumentError(error);
    if (sp.eos_id() >= 0) ids.push_back(sp.eos_id());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

absl::Status WriteShards(const std::string& out, TokenShard all_train, TokenShard val) {
  const size_t per = static_cast<size_t>(absl::GetFlag(FLAGS_shard_tokens));
  if (per < 1) return absl::InvalidArgumentError("--shard_tokens must be positive");
  size_t n = 0;
  for (size_t at = 0; at < all_train.tokens.size(); at += per, ++n) {
    TokenShard s{all_train.vocab_size, all_train.tokenizer, {}};
    s.tokens.assign(all_train.tokens.begin() + at,
                    all_train.tokens.begin() + std::min(at + per, all_train.tokens.size()));
    if (absl::Status st = WriteFileAtomic(absl::StrFormat("%s/train-%05d.bin", out, n), ShardBytes(s)); !st.ok()) {
      return st;
    }
  }
  return WriteFileAtomic(out + "/val.bin", ShardBytes(val));
}

// --encode / --decode: stdin to stdout through the tokenizer `model`.
int Translate(const std::string& model, bool encode) {
  SentencePiece sp;
  if (std::string error = sp.Load(model); !error.empty()) {
    std::fprintf(stderr, "muloco-prepare: %s: %s\n", model.c_str(), error.c_str());
    return 1;
  }
  std::string in, out, error;
  for (char buf[4096]; size_t n = std::fread(buf, 1, sizeof buf, stdin);) in.append(buf, n);
  std::vector<int> ids;
  if (encode) {
    error = sp.Encode(in, &ids);
    for (size_t i = 0; i < ids.size(); ++i) absl::StrAppend(&out, i ? " " : "", ids[i]);
    out += "\n";
  } else {
    for (absl::string_view id : absl::StrSplit(in, absl::ByAnyChar(" \n\t"), absl::SkipWhitespace())) {
      int v;
      if (!absl::SimpleAtoi(id, &v) || v < 0 || v >= sp.vocab_size()) {
        std::fprintf(stderr, "muloco-prepare: --decode: not a token id of %s: %s\n", model.c_str(),
                     std::string(id).c_str());
        return 1;
      }
      ids.push_back(v);
    }
    error = sp.Decode(ids, &out);
  }
  if (!error.empty()) {
    std::fprintf(stderr, "muloco-prepare: %s\n", error.c_str());
    return 1;
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int Prepare() {
  if (!absl::GetFlag(FLAGS_encode).empty()) return Translate(absl::GetFlag(FLAGS_encode), /*encode=*/true);
  if (!absl::GetFlag(FLAGS_decode).empty()) return Translate(absl::GetFlag(FLAGS_decode), /*encode=*/false);
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string text = absl::GetFlag(FLAGS_text).empty() ? kDefaultCorpus : absl::GetFlag(FLAGS_text);
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "muloco-prepare: %s\n", std::string(s.message()).c_str());
    return 1;
  };
  if (out.empty()) return fail(absl::InvalidArgumentError("--out is required"));
  absl::StatusOr<Documents> docs = ReadDocuments(text);
  if (!docs.ok()) return fail(docs.status());
  if (absl::Status s = MakeDirs(out); !s.ok()) return fail(s);
  if (absl::Status s = MakeTokenizer(*docs, out); !s.ok()) return fail(s);
  SentencePiece sp;
  if (std::string error = sp.Load(out + "/tokenizer.model"); !error.empty()) {
    return fail(absl::InvalidArgumentError("tokenizer.model: " + error));
  }
  if (sp.vocab_size() > 65536) return fail(absl::InvalidArgumentError("the tokenizer has more than 65536 pieces"));
  absl::StatusOr<std::string> model = ReadFile(out + "/tokenizer.model");
  if (!model.ok()) return fail(model.status());
  const uint32_t vocab = static_cast<uint32_t>(sp.vocab_size());
  const uint64_t checksum = TokenizerChecksum(*model);
  absl::StatusOr<std::vector<uint16_t>> train = EncodeAll(sp, docs->train), val = EncodeAll(sp, docs->val);
  if (!train.ok()) return fail(train.status());
  if (!val.ok()) return fail(val.status());
  const size_t train_tokens = train->size(), val_tokens = val->size();
  if (absl::Status s = WriteShards(out, TokenShard{vocab, checksum, *std::move(train)},
                                   TokenShard{vocab, checksum, *std::move(val)});
      !s.ok()) {
    return fail(s);
  }
  size_t bytes = 0;
  for (const std::string& d : docs->train) bytes += d.size();
  std::printf("muloco-prepare: %s: %zu documents, %zu train tokens (%.2f bytes per token), %zu val tokens\n",
              out.c_str(), docs->train.size() + docs->val.size(), train_tokens,
              static_cast<double>(bytes) / std::max<size_t>(train_tokens, 1), val_tokens);
  std::printf("tokenizer: vocab %u, checksum %llu\n", vocab, static_cast<unsigned long long>(checksum));
  std::printf("serve with: muloco-server --vocab_size=%u --tokenizer_checksum=%llu ...; workers: --data=%s\n", vocab,
              static_cast<unsigned long long>(checksum), out.c_str());
  return 0;
}

}  // namespace
}  // namespace muloco

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "text to token shards (SentencePiece BPE).\n  muloco-prepare --text=DIR --out=shards --pieces=4096");
  if (std::vector<char*> rest = absl::ParseCommandLine(argc, argv); rest.size() > 1) {
    std::fprintf(stderr, "muloco-prepare: unexpected argument %s\n", rest[1]);
    return 2;
  }
  return muloco::Prepare();
}
