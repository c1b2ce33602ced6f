// Corpus loading and window sampling (see data.h).
#include "worker/data.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "common/file_io.h"
#include "common/token_shards.h"

namespace muloco {
namespace {

bool IsDir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Text files of a directory, sorted by name; skips fortune index (.dat) files, symlinks
// (fortunes' .u8 aliases) and subdirectories.
absl::StatusOr<std::vector<std::string>> TextFiles(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return absl::NotFoundError(absl::StrCat("cannot open directory ", dir));
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name, path = dir + "/" + name;
    struct stat st;
    if (name[0] == '.' || absl::EndsWith(name, ".dat") || lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    files.push_back(path);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  if (files.empty()) return absl::NotFoundError(absl::StrCat("no text files in ", dir));
  return files;
}

void AppendBytes(absl::string_view text, std::vector<uint16_t>& out) {
  for (unsigned char c : text) out.push_back(c);
}

absl::StatusOr<Corpus> LoadText(const std::string& path) {
  absl::StatusOr<Documents> docs = ReadDocuments(path);
  if (!docs.ok()) return docs.status();
  Corpus c;
  for (const std::string& d : docs->train) AppendBytes(d, c.train);
  for (const std::string& d : docs->val) AppendBytes(d, c.val);
  c.description = absl::StrCat("text ", path, " (", docs->files, " files, ", docs->train.size() + docs->val.size(),
                               " documents)");
  return c;
}

// A muloco-prepare directory: val.bin and the other .bin files (train shards, in name
// order), each checked against the run's vocabulary and tokenizer.
absl::StatusOr<Corpus> LoadShards(const std::string& dir, uint32_t vocab_size, uint64_t tokenizer) {
  absl::StatusOr<std::vector<std::string>> files = TextFiles(dir);
  if (!files.ok()) return files.status();
  Corpus c;
  size_t shards = 0;
  for (const std::string& file : *files) {
    if (!absl::EndsWith(file, ".bin")) continue;
    absl::StatusOr<std::string> bytes = ReadFile(file);
    if (!bytes.ok()) return bytes.status();
    absl::StatusOr<TokenShard> shard = ParseShard(*bytes);
    if (!shard.ok()) return absl::InvalidArgumentError(absl::StrCat(file, ": ", shard.status().message()));
    if (shard->vocab_size != vocab_size) {
      return absl::FailedPreconditionError(absl::StrCat(file, ": tokenized for a vocabulary of ", shard->vocab_size,
                                                        "; the run's is ", vocab_size, " (--vocab_size)"));
    }
    if (shard->tokenizer != tokenizer) {
      return absl::FailedPreconditionError(
          tokenizer == 0 ? absl::StrCat(file, ": tokenized by tokenizer ", shard->tokenizer,
                                        ", and the run names none: start the server with --tokenizer_checksum=",
                                        shard->tokenizer)
                         : absl::StrCat(file, ": tokenized by tokenizer ", shard->tokenizer, ", not the run's ",
                                        tokenizer, ": prepare the data with the run's tokenizer.model"));
    }
    std::vector<uint16_t>& dst = absl::EndsWith(file, "/val.bin") ? c.val : c.train;
    dst.insert(dst.end(), shard->tokens.begin(), shard->tokens.end());
    shards += absl::EndsWith(file, "/val.bin") ? 0 : 1;
  }
  c.description = absl::StrCat("shards ", dir, " (", shards, " train + val.bin, tokenizer ", tokenizer, ")");
  return c;
}

absl::StatusOr<std::vector<uint16_t>> ReadTokens(const std::string& path) {
  absl::StatusOr<std::string> raw = ReadFile(path);
  if (!raw.ok()) return raw.status();
  if (raw->size() % 2 != 0) return absl::InvalidArgumentError(absl::StrCat(path, ": odd size for uint16 tokens"));
  std::vector<uint16_t> tokens(raw->size() / 2);
  std::copy(raw->data(), raw->data() + raw->size(), reinterpret_cast<char*>(tokens.data()));
  return tokens;
}

}  // namespace

absl::StatusOr<Documents> ReadDocuments(const std::string& path) {
  std::vector<std::string> files;
  if (IsDir(path)) {
    absl::StatusOr<std::vector<std::string>> f = TextFiles(path);
    if (!f.ok()) return f.status();
    files = *std::move(f);
  } else {
    files.push_back(path);
  }
  Documents out;
  out.files = files.size();
  size_t docs = 0;
  for (const std::string& file : files) {
    absl::StatusOr<std::string> text = ReadFile(file);
    if (!text.ok()) return text.status();
    std::vector<absl::string_view> parts = absl::StrSplit(*text, "\n%\n");
    if (parts.size() == 1) {  // not fortune-formatted: 1 KiB blocks are the documents
      parts.clear();
      for (size_t i = 0; i < text->size(); i += 1024) parts.push_back(absl::string_view(*text).substr(i, 1024));
    }
    for (absl::string_view doc : parts) {
      ((docs++ % 10 == 9) ? out.val : out.train).push_back(absl::StrCat(doc, "\n%\n"));
    }
  }
  return out;
}

absl::StatusOr<Corpus> LoadCorpus(const std::string& given_path, const std::string& val_path, uint32_t vocab_size,
                                  size_t window, uint64_t tokenizer) {
  const std::string path = given_path.empty() ? kDefaultCorpus : given_path;
  const bool shards = IsDir(path) && IsFile(path + "/val.bin");
  if (tokenizer != 0 && !shards) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the run's tokens come from tokenizer ", tokenizer, ": give --data the directory muloco-prepare wrote with it, not ",
        path));
  }
  absl::StatusOr<Corpus> corpus;
  if (shards) {
    if (!val_path.empty()) return absl::InvalidArgumentError("--val_data: a shard directory holds its own val.bin");
    corpus = LoadShards(path, vocab_size, tokenizer);
    if (!corpus.ok()) return corpus.status();
  } else if (absl::EndsWith(path, ".bin")) {
    corpus.emplace();
    absl::StatusOr<std::vector<uint16_t>> train = ReadTokens(path);
    if (!train.ok()) return train.status();
    corpus->train = *std::move(train);
    if (!val_path.empty()) {
      absl::StatusOr<std::vector<uint16_t>> val = ReadTokens(val_path);
      if (!val.ok()) return val.status();
      corpus->val = *std::move(val);
    } else {
      const size_t cut = corpus->train.size() - corpus->train.size() / 10;
      corpus->val.assign(corpus->train.begin() + cut, corpus->train.end());
      corpus->train.resize(cut);
    }
    corpus->description = absl::StrCat("tokens ", path, val_path.empty() ? "" : " + " + val_path);
  } else {
    if (!val_path.empty()) return absl::InvalidArgumentError("--val_data applies to .bin token files only");
    corpus = LoadText(path);
    if (!corpus.ok()) return corpus.status();
  }
  for (const std::vector<uint16_t>* split : {&corpus->train, &corpus->val}) {
    if (split->size() <= window) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": a split has ", split->size(),
                                                     " tokens; need more than the window of ", window));
    }
    const uint16_t top = *std::max_element(split->begin(), split->end());
    if (top >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": token ", top, " >= vocab_size ", vocab_size));
    }
  }
  absl::StrAppend(&corpus->description, ": ", corpus->train.size(), " train / ", corpus->val.size(), " val tokens");
  return corpus;
}

void SampleWindows(const std::vector<uint16_t>& tokens, size_t batch, size_t window, std::mt19937_64& rng,
                   std::vector<int64_t>& out) {
  out.resize(batch * (window + 1));
  std::uniform_int_distribution<size_t> start(0, tokens.size() - window - 1);
  for (size_t b = 0; b < batch; ++b) {
    const size_t s = start(rng);
    std::copy(tokens.begin() + s, tokens.begin() + s + window + 1, out.begin() + b * (window + 1));
  }
}

}  // namespace muloco
