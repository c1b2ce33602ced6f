// Golden payloads: every scheme's bytes, residual and decode for fixed integer-derived
// inputs, compared with tests/data/codec_golden.txt (written by the codec before its
// kernels moved behind a backend table). Any change to what goes on the wire, or to the
// error-feedback arithmetic, shows up here as a changed hash.
// Regenerate (only for a deliberate format change): MULOCO_WRITE_GOLDEN=1 codec_golden_test
#include "codec/codec.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "codec/checksum.h"

namespace muloco {
namespace {

// Tensors of a tiny model: a matrix, a gain vector, a matrix whose size is not a multiple
// of the chunks used below.
const std::vector<TensorShape> kShapes = {{48, 48 * 100, false}, {1, 100, true}, {37, 37 * 64, false}};
constexpr uint64_t kN = 48 * 100 + 100 + 37 * 64;

const char* kGoldenSpecs[] = {
    "dense-fp32", "dense-bf16", "quant:bits=1,chunk=64", "quant:bits=2,chunk=512", "quant:bits=4,chunk=64",
    "quant:bits=8,chunk=64", "lloyd:bits=1,chunk=4096,vectors=same", "lloyd:bits=2,chunk=512", "lloyd:bits=4,chunk=64",
    "linear:bits=2,chunk=64", "linear:bits=8,chunk=64,vectors=same", "topk:chunk=64,k=5,bits=2",
    "topk:chunk=64,k=5,bits=32", "topk:chunk=256,k=32,bits=2,vectors=same", "topk:ratio=0.05,bits=2",
    "sign:chunk=64", "sign:chunk=1024,vectors=same"};

// Deterministic inputs from integers only (no libm): values in [-1, 1] * scale, every 7th
// element exactly zero (sign ties), a few outliers.
std::vector<float> Input(uint64_t seed, float scale) {
  std::vector<float> v(kN);
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (uint64_t i = 0; i < kN; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    const int32_t r = static_cast<int32_t>((s >> 33) % 200001) - 100000;
    v[i] = i % 7 == 3 ? 0.0f : static_cast<float>(r) * (scale * 1e-5f);
    if (i % 997 == 11) v[i] *= 50.0f;
  }
  return v;
}

uint64_t Hash(const void* p, size_t bytes) { return Checksum64(p, bytes, 7); }

// One line per spec: two error-feedback rounds (beta 0.9, tie seeds 0 and 12345), then the
// plain encoding of a third input and its decode.
std::string Record(const char* spec) {
  CodecConfig c = *ParseCodec(spec);
  const std::vector<Segment> plan = PlanSegments(kShapes, c);
  std::vector<float> ef(kN, 0.0f);
  std::ostringstream line;
  line << spec;
  for (int round = 0; round < 2; ++round) {
    const std::vector<float> delta = Input(round + 1, 0.01f);
    const std::string p = Compress(plan, delta.data(), 0.9f, ef.data(), round * 12345, 1 + round);
    line << " " << p.size() << ":" << std::hex << Hash(p.data(), p.size()) << ":" << Hash(ef.data(), kN * 4)
         << std::dec;
  }
  const std::vector<float> x = Input(3, 0.02f);
  const std::string p = Encode(plan, x.data());
  std::vector<float> sum = Input(4, 0.001f);
  EXPECT_TRUE(DecodeAccumulate(p, kN, sum.data()).ok()) << spec;
  line << " " << std::hex << Hash(p.data(), p.size()) << ":" << Hash(sum.data(), kN * 4) << std::dec;
  return line.str();
}

std::string GoldenPath() { return std::string(MULOCO_SOURCE_DIR) + "/tests/data/codec_golden.txt"; }

TEST(CodecGolden, PayloadsResidualsAndDecodesAreUnchanged) {
  std::vector<std::string> now;
  for (const char* spec : kGoldenSpecs) now.push_back(Record(spec));
  if (std::getenv("MULOCO_WRITE_GOLDEN")) {
    std::ofstream out(GoldenPath());
    for (const std::string& l : now) out << l << "\n";
    GTEST_SKIP() << "wrote " << GoldenPath();
  }
  std::ifstream in(GoldenPath());
  ASSERT_TRUE(in) << "missing " << GoldenPath();
  std::map<std::string, std::string> golden;
  for (std::string l; std::getline(in, l);) golden[l.substr(0, l.find(' '))] = l;
  for (const std::string& l : now) {
    const std::string spec = l.substr(0, l.find(' '));
    ASSERT_TRUE(golden.count(spec)) << "no golden line for " << spec;
    EXPECT_EQ(golden[spec], l) << "payload bytes, residual or decode changed for " << spec;
  }
}

// Sign votes counted: nonzero elements vote their sign, exact zeros a coin of +-1.
TEST(CodecGolden, VoteCountsMatchTheSigns) {
  CodecConfig c = *ParseCodec("sign:chunk=64,vectors=same");
  const std::vector<Segment> plan = PlanSegments(kShapes, c);
  std::vector<int32_t> counts(kN, 0), expect(kN, 0), coins(kN, 0);
  for (uint64_t w = 0; w < 3; ++w) {
    std::vector<float> x = Input(10 + w, 0.01f);
    for (uint64_t i = 0; i < kN; ++i) {
      expect[i] += x[i] > 0 ? 1 : x[i] < 0 ? -1 : 0;
      coins[i] += x[i] == 0;
    }
    ASSERT_TRUE(VoteAccumulate(Compress(plan, nullptr, 1.0f, x.data(), w * kN), kN, counts.data()).ok());
  }
  for (uint64_t i = 0; i < kN; ++i) {
    const int32_t from_coins = counts[i] - expect[i];  // each coin adds +-1
    ASSERT_LE(std::abs(from_coins), coins[i]) << i;
    ASSERT_EQ(std::abs(from_coins) % 2, coins[i] % 2) << i;
  }
}

}  // namespace
}  // namespace muloco
