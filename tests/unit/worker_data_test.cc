// Corpus loading (text directories, fortune documents, uint16 token files, shard directories
// checked against the run's tokenizer), validation of
// bad data, window sampling, and the GPT's parameter plumbing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>

#include "common/model_layout.h"
#include "common/run_config.h"
#include "common/token_shards.h"
#include "worker/data.h"
#include "worker/language_model.h"

namespace muloco {
namespace {

std::string Dir() {
  std::string d = std::string(::testing::TempDir()) + "/muloco_data_" + std::to_string(getpid());
  EXPECT_EQ(std::system(("rm -rf " + d + " && mkdir -p " + d).c_str()), 0);
  return d;
}

TEST(Data, FortuneDocumentsSplitOneInTenToValidation) {
  const std::string d = Dir();
  std::ofstream f(d + "/jokes");
  for (int i = 0; i < 20; ++i) f << (i % 10 == 9 ? "VALIDATION" : "training") << " doc " << i << "\n%\n";
  f.close();
  std::ofstream(d + "/jokes.dat") << "index file, ignored";
  absl::StatusOr<Corpus> c = LoadCorpus(d, "", 256, 8);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string train(c->train.begin(), c->train.end()), val(c->val.begin(), c->val.end());
  EXPECT_EQ(train.find("VALIDATION"), std::string::npos);
  EXPECT_NE(val.find("VALIDATION doc 9"), std::string::npos);
  EXPECT_NE(val.find("VALIDATION doc 19"), std::string::npos);
  EXPECT_EQ(train.find("index file"), std::string::npos);
}

TEST(Data, TokenFilesAndTheirErrors) {
  const std::string d = Dir();
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = i % 50;
  std::ofstream(d + "/train.bin", std::ios::binary).write(reinterpret_cast<char*>(tokens.data()), 2000);
  absl::StatusOr<Corpus> c = LoadCorpus(d + "/train.bin", "", 50, 16);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train.size(), 900u);
  EXPECT_EQ(c->val.size(), 100u);
  EXPECT_EQ(c->val[0], 900 % 50);
  EXPECT_EQ(LoadCorpus(d + "/train.bin", "", 49, 16).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadCorpus(d + "/train.bin", "", 50, 500).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadCorpus(d + "/missing.bin", "", 50, 16).status().code(), absl::StatusCode::kNotFound);
  std::ofstream(d + "/odd.bin", std::ios::binary) << "abc";
  EXPECT_EQ(LoadCorpus(d + "/odd.bin", "", 50, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadCorpus(d + "/empty_dir_missing", "", 256, 8).status().code(), absl::StatusCode::kNotFound);
}

void WriteShard(const std::string& path, uint32_t vocab, uint64_t tokenizer, size_t n) {
  TokenShard s{vocab, tokenizer, {}};
  for (size_t i = 0; i < n; ++i) s.tokens.push_back(static_cast<uint16_t>((i * 7) % vocab));
  std::ofstream(path, std::ios::binary) << ShardBytes(s);
}

TEST(Data, ShardsRoundTripAndRefuseWhatIsWrong) {
  TokenShard s{300, 42, {0, 299, 7}};
  absl::StatusOr<TokenShard> back = ParseShard(ShardBytes(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tokens, s.tokens);
  EXPECT_EQ(back->vocab_size, 300u);
  EXPECT_EQ(back->tokenizer, 42u);
  EXPECT_EQ(ShardBytes(s).size(), kShardHeaderBytes + 6);
  std::string bytes = ShardBytes(s);
  EXPECT_FALSE(ParseShard(bytes.substr(0, bytes.size() - 1)).ok());   // the count and the size differ
  EXPECT_FALSE(ParseShard("MULOCOT0" + bytes.substr(8)).ok());          // not a shard
  s.tokens[1] = 300;
  EXPECT_FALSE(ParseShard(ShardBytes(s)).ok());                         // a token outside the vocabulary
}

TEST(Data, AShardDirectoryIsTheRunsTokensOrIsRefused) {
  const std::string d = Dir();
  WriteShard(d + "/train-00000.bin", 300, 42, 500);
  WriteShard(d + "/train-00001.bin", 300, 42, 400);
  WriteShard(d + "/val.bin", 300, 42, 100);
  absl::StatusOr<Corpus> c = LoadCorpus(d, "", 300, 16, 42);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train.size(), 900u);  // both shards, in name order
  EXPECT_EQ(c->train[500], 0);
  EXPECT_EQ(c->val.size(), 100u);
  absl::Status vocab = LoadCorpus(d, "", 512, 16, 42).status();
  EXPECT_EQ(vocab.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(vocab.message().find("vocabulary of 300; the run's is 512"), std::string::npos) << vocab;
  absl::Status other = LoadCorpus(d, "", 300, 16, 43).status();
  EXPECT_NE(other.message().find("not the run's 43"), std::string::npos) << other;
  absl::Status unnamed = LoadCorpus(d, "", 300, 16, 0).status();
  EXPECT_NE(unnamed.message().find("--tokenizer_checksum=42"), std::string::npos) << unnamed;
  absl::Status bytes = LoadCorpus(kDefaultCorpus, "", 300, 16, 42).status();  // text when the run is on tokens
  EXPECT_EQ(bytes.code(), absl::StatusCode::kFailedPrecondition);
  std::ofstream(d + "/train-00002.bin", std::ios::binary) << "not a shard";
  EXPECT_EQ(LoadCorpus(d, "", 300, 16, 42).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Data, DefaultCorpusIsFortunes) {
  absl::StatusOr<Corpus> c = LoadCorpus(kDefaultCorpus, "", 256, 64);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GT(c->train.size(), 1000000u);
  EXPECT_GT(c->val.size(), c->train.size() / 20);
}

TEST(Data, WindowsAreContiguousSlices) {
  std::vector<uint16_t> tokens(100);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i);
  std::mt19937_64 rng(3);
  std::vector<int64_t> out;
  std::set<int64_t> starts;
  for (int rep = 0; rep < 50; ++rep) {
    SampleWindows(tokens, 4, 9, rng, out);
    ASSERT_EQ(out.size(), 40u);
    for (size_t b = 0; b < 4; ++b) {
      starts.insert(out[b * 10]);
      for (size_t t = 1; t < 10; ++t) ASSERT_EQ(out[b * 10 + t], out[b * 10] + static_cast<int64_t>(t));
      ASSERT_LE(out[b * 10 + 9], 99);
    }
  }
  EXPECT_GT(starts.size(), 40u);  // offsets really vary
}

TEST(Gpt, ParametersFollowTheLayoutAndLossStartsNearUniform) {
  v1::ModelSpec s = DefaultRunConfig().model();
  Gpt gpt(s);
  const ParamLayout layout = GptLayout(s);
  ASSERT_EQ(gpt.params().size(), layout.size());
  for (size_t i = 0; i < layout.size(); ++i) EXPECT_EQ(gpt.params()[i].sizes().vec(), layout[i].shape) << layout[i].name;
  std::vector<float> init = InitParams(s, layout), back(init.size());
  gpt.LoadFlat(init.data());
  gpt.StoreFlat(back.data());
  EXPECT_EQ(init, back);
  torch::Tensor tokens = torch::randint(0, 256, {2, 17}, torch::kInt64);
  const double loss = gpt.Loss(tokens).item<double>();
  EXPECT_NEAR(loss, std::log(256.0), 0.1);
}

}  // namespace
}  // namespace muloco
