// SentencePiece through worker/sentencepiece.h: a BPE tokenizer trained on fortunes text
// has the pieces asked for, encodes every document back to its exact text (byte fallback,
// identity normalisation: tabs, newlines, runs of spaces and non-ASCII survive) and
// compresses it below one token per byte.
#include "worker/sentencepiece.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace muloco {
namespace {

TEST(Tokenizer, TrainedBpeDecodesEveryTextExactly) {
  const std::string d = std::string(::testing::TempDir()) + "/muloco_spm_" + std::to_string(getpid());
  ASSERT_EQ(std::system(("rm -rf " + d + " && mkdir -p " + d).c_str()), 0);
  std::ifstream in("/usr/share/games/fortunes/fortunes");
  std::stringstream text;
  text << in.rdbuf();
  std::ofstream(d + "/input.txt") << text.str();
  ASSERT_EQ(SentencePiece::TrainBpe(d + "/input.txt", 400, d + "/tok", 2), "");
  SentencePiece sp;
  ASSERT_EQ(sp.Load(d + "/tok.model"), "");
  EXPECT_EQ(sp.vocab_size(), 400);
  EXPECT_GE(sp.eos_id(), 0);
  const std::string samples[] = {text.str().substr(0, 4000), "tabs\tand  double  spaces\n\nand newlines\n",
                                 "caf\xc3\xa9 \xe2\x82\xac 12345 \x01 bytes"};
  for (const std::string& s : samples) {
    std::vector<int> ids;
    ASSERT_EQ(sp.Encode(s, &ids), "");
    for (int id : ids) ASSERT_TRUE(id >= 0 && id < 400);
    std::string back;
    ASSERT_EQ(sp.Decode(ids, &back), "");
    EXPECT_EQ(back, s);
  }
  std::vector<int> ids;
  ASSERT_EQ(sp.Encode(samples[0], &ids), "");
  EXPECT_LT(ids.size(), samples[0].size() * 0.75);  // BPE merges, learnt from 22 KB: under a token per byte
  EXPECT_NE(SentencePiece::TrainBpe(d + "/missing.txt", 400, d + "/bad", 1), "");
  EXPECT_NE(sp.Load(d + "/missing.model"), "");
}

}  // namespace
}  // namespace muloco
