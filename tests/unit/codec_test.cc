// Payload codec: every scheme round-trips at sizes 0, 1, C-1, C, C+1 and large with sizes
// equal to their formula; error feedback conserves the signal exactly; hostile payloads are
// rejected without writes.
#include "codec/codec.h"

#include "codec/checksum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

namespace muloco {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> Decode(const std::string& p, size_t n) {
  std::vector<float> out(n, 0.0f);
  absl::Status s = DecodeAccumulate(p, n, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

uint64_t Ceil(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The payload size, written out independently of the codec for each scheme.
uint64_t ExpectedBytes(const CodecConfig& c, uint64_t n) {
  if (c.keep > 0) {  // a u32 seed, then the same layout over chunks of k kept elements
    const uint64_t k = static_cast<uint64_t>(c.keep * c.chunk) / 8 * 8;
    CodecConfig kept = c;
    kept.keep = 0;
    kept.chunk = static_cast<uint32_t>(k);
    return 4 + ExpectedBytes(kept, (n / c.chunk) * k + std::min<uint64_t>(k, n % c.chunk));
  }
  const uint64_t C = c.chunk, nc = Ceil(n, C), bins = 1ull << c.bits;
  uint64_t data = 0;
  switch (c.scheme) {
    case Scheme::kDenseFp32: data = 4 * n; break;
    case Scheme::kDenseBf16: data = 2 * n; break;
    case Scheme::kQuant:
    case Scheme::kLloyd: data = nc * bins * 4 + Ceil(n * c.bits, 8); break;
    case Scheme::kLinear: data = nc * 8 + Ceil(n * c.bits, 8); break;
    case Scheme::kSign: data = nc * 4 + Ceil(n, 8); break;
    case Scheme::kTopK: {
      const uint64_t kept = (n / C) * c.k + std::min<uint64_t>(c.k, n % C);
      const uint64_t idx_bits = static_cast<uint64_t>(std::log2(C));
      data = Ceil(kept * idx_bits, 8) + (c.bits == 32 ? 4 * kept : bins * 4 + Ceil(kept * c.bits, 8));
      break;
    }
  }
  return 32 + 32 + data;
}

const char* kSpecs[] = {"dense-fp32", "dense-bf16", "quant:bits=1,chunk=64", "quant:bits=2,chunk=64",
                        "quant:bits=4,chunk=64", "quant:bits=8,chunk=64", "lloyd:bits=1,chunk=64",
                        "lloyd:bits=2,chunk=64", "lloyd:bits=4,chunk=64", "linear:bits=2,chunk=64",
                        "linear:bits=8,chunk=64", "topk:chunk=64,k=5,bits=2", "topk:chunk=64,k=5,bits=32",
                        "topk:chunk=64,k=64,bits=8", "sign:chunk=64", "lloyd:bits=1,chunk=64,keep=0.75",
                        "quant:bits=2,chunk=64,keep=0.5", "linear:bits=4,chunk=64,keep=0.9"};

TEST(Codec, EverySchemeRoundTripsWithExactSizes) {
  for (const char* spec : kSpecs) {
    absl::StatusOr<CodecConfig> c = ParseCodec(spec);
    ASSERT_TRUE(c.ok()) << spec << ": " << c.status();
    for (size_t n : {0u, 1u, 63u, 64u, 65u, 100003u}) {
      std::vector<float> x = Random(n, n + 1);
      std::vector<Segment> segs = PlanSegments({TensorShape{1, n, false}}, *c);
      std::vector<float> residual = x;
      const std::string p = Compress(segs, nullptr, 1.0f, residual.data());
      ASSERT_EQ(p.size(), ExpectedBytes(*c, n)) << spec << " n=" << n;
      ASSERT_EQ(p.size(), PayloadBytes(segs));
      std::vector<float> y = Decode(p, n);
      double err = 0, energy = 0;
      for (size_t i = 0; i < n; ++i) {
        // decoded + residual = input (residual = x - decoded, rounded once)
        ASSERT_NEAR(y[i] + residual[i], x[i], 1e-6f * (1 + std::fabs(x[i]))) << spec << " i=" << i;
        err += (x[i] - y[i]) * (x[i] - y[i]);
        energy += x[i] * x[i];
      }
      if (c->scheme == Scheme::kDenseFp32) {
        EXPECT_EQ(err, 0.0);
      }
      if (n > 1000 && c->scheme != Scheme::kTopK) {
        EXPECT_LT(err, 0.75 * energy) << spec;  // carries signal
      }
    }
  }
}

// Equal bytes per element (lloyd/quant at chunk 512: 16 bytes of table; linear at 256: 8
// bytes): Lloyd–Max bins give the smallest error on Gaussian data.
TEST(Codec, LloydBinsBeatStatisticalAndLinearAtEqualBytes) {
  const size_t n = 1 << 16;
  const std::vector<float> x = Random(n, 77);
  auto mse = [&](const char* spec) {
    const std::vector<Segment> segs = PlanSegments({TensorShape{1, n, false}}, *ParseCodec(spec));
    const std::vector<float> y = Decode(Encode(segs, x.data()), n);
    double e = 0;
    for (size_t i = 0; i < n; ++i) e += (x[i] - y[i]) * (x[i] - y[i]);
    return std::make_pair(e / n, PayloadBytes(segs));
  };
  const auto lloyd = mse("lloyd:bits=2,chunk=512"), stat = mse("quant:bits=2,chunk=512"),
             linear = mse("linear:bits=2,chunk=256");
  EXPECT_EQ(lloyd.second, linear.second);
  EXPECT_EQ(lloyd.second, stat.second);
  EXPECT_NEAR(lloyd.first, 0.1175, 0.01);  // Lloyd–Max's 2-bit MSE for N(0,1)
  EXPECT_LT(lloyd.first, 0.75 * stat.first);
  EXPECT_LT(lloyd.first, 0.6 * linear.first);
}

TEST(Codec, TopKDecodesOnlyTheLargestPerChunk) {
  const CodecConfig c = *ParseCodec("topk:chunk=64,k=4,bits=32");
  std::vector<float> x = Random(200, 9);
  std::vector<float> y = Decode(Encode(PlanSegments({TensorShape{1, 200, false}}, c), x.data()), 200);
  for (size_t base = 0; base < 200; base += 64) {
    const size_t len = std::min<size_t>(64, 200 - base);
    std::vector<float> mags;
    for (size_t i = base; i < base + len; ++i) mags.push_back(std::fabs(x[i]));
    std::sort(mags.rbegin(), mags.rend());
    const float threshold = mags[std::min<size_t>(4, len) - 1];
    size_t kept = 0;
    for (size_t i = base; i < base + len; ++i) {
      if (y[i] != 0) {
        ++kept;
        EXPECT_EQ(y[i], x[i]);
        EXPECT_GE(std::fabs(x[i]), threshold);
      }
    }
    EXPECT_EQ(kept, std::min<size_t>(4, len));
  }
}

TEST(Codec, TopKPerTensorRatioKeepsThatShareOfEachTensor) {
  const CodecConfig c = *ParseCodec("topk:ratio=0.01,bits=32");
  EXPECT_EQ(CodecName(c), "topk:ratio=0.01,bits=32");
  const std::vector<Segment> segs = PlanSegments({TensorShape{10, 5000, false}, TensorShape{1, 50, false}}, c);
  EXPECT_EQ(segs[0].chunk, 8192u);
  EXPECT_EQ(segs[0].k, 50u);
  EXPECT_EQ(segs[1].k, 1u);  // at least one per tensor
  std::vector<float> x = Random(5050, 3), y(5050, 0.0f);
  ASSERT_TRUE(DecodeAccumulate(Encode(segs, x.data()), 5050, y.data()).ok());
  std::vector<float> mags;
  for (size_t i = 0; i < 5000; ++i) mags.push_back(std::fabs(x[i]));
  std::sort(mags.rbegin(), mags.rend());
  size_t kept = 0;
  for (size_t i = 0; i < 5000; ++i) {
    if (y[i] != 0) {
      ++kept;
      EXPECT_GE(std::fabs(x[i]), mags[49]);
    }
  }
  EXPECT_EQ(kept, 50u);
  EXPECT_FALSE(ParseCodec("topk:ratio=0").ok());
  EXPECT_FALSE(ParseCodec("topk:ratio=2").ok());
}

TEST(Codec, ErrorFeedbackConservesTheSumOverManyRounds) {
  // sum of decoded payloads + final residual = sum of inputs (beta = 1), to float tolerance.
  for (const char* spec :
       {"quant:bits=2,chunk=64", "lloyd:bits=2,chunk=64", "topk:chunk=64,k=3,bits=2", "sign:chunk=64", "dense-bf16"}) {
    const size_t n = 1000;
    const CodecConfig c = *ParseCodec(spec);
    const std::vector<Segment> segs = PlanSegments({TensorShape{10, n, false}}, c);
    std::vector<float> ef(n, 0.0f), decoded(n, 0.0f);
    std::vector<double> inputs(n, 0.0);
    for (int r = 0; r < 50; ++r) {
      std::vector<float> delta = Random(n, 100 + r, 0.01f);
      for (size_t i = 0; i < n; ++i) inputs[i] += delta[i];
      const std::string p = Compress(segs, delta.data(), 1.0f, ef.data());
      ASSERT_TRUE(DecodeAccumulate(p, n, decoded.data()).ok());
    }
    double max_gap = 0, max_ef = 0;
    for (size_t i = 0; i < n; ++i) {
      max_gap = std::max(max_gap, std::fabs(decoded[i] + ef[i] - inputs[i]));
      max_ef = std::max(max_ef, static_cast<double>(std::fabs(ef[i])));
    }
    EXPECT_LT(max_gap, 1e-5) << spec;
    EXPECT_LT(max_ef, 1.0) << spec << ": the residual stays bounded";
  }
}

// MuLoCo's code feeds back e ← β·e + η·Δ; muloco feeds back e ← β·e + Δ and applies η on
// the server. The codecs are scale-equivariant (C(η·x) = η·C(x)), so by induction the two
// send the same updates: exactly so for a power-of-two η, which scales every float exactly.
TEST(Codec, ErrorFeedbackWithTheOuterLrInsideSendsTheSameUpdates) {
  const float eta = 0.5f, beta = 0.9f;
  for (const char* spec : {"lloyd:bits=2,chunk=64", "lloyd:bits=1,chunk=64", "quant:bits=2,chunk=64",
                           "topk:chunk=64,k=3,bits=2", "dense-bf16"}) {
    const size_t n = 1000;
    const std::vector<Segment> segs = PlanSegments({TensorShape{10, n, false}}, *ParseCodec(spec));
    std::vector<float> ef_outside(n, 0.0f), ef_inside(n, 0.0f);
    for (int r = 0; r < 20; ++r) {
      std::vector<float> delta = Random(n, 300 + r, 0.01f), scaled = delta;
      for (float& v : scaled) v *= eta;
      const std::vector<float> a = Decode(Compress(segs, delta.data(), beta, ef_outside.data()), n);
      const std::vector<float> b = Decode(Compress(segs, scaled.data(), beta, ef_inside.data()), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(eta * a[i], b[i]) << spec << " round " << r << " i " << i;
        ASSERT_EQ(eta * ef_outside[i], ef_inside[i]) << spec << " round " << r << " i " << i;
      }
    }
  }
}

TEST(Codec, VectorsStayDenseWhenAsked) {
  const CodecConfig c = *ParseCodec("quant:bits=2");
  std::vector<Segment> segs = PlanSegments({TensorShape{64, 64 * 64, false}, TensorShape{1, 64, true}}, c);
  EXPECT_EQ(segs[0].scheme, Scheme::kQuant);
  EXPECT_EQ(segs[1].scheme, Scheme::kDenseFp32);
  segs = PlanSegments({TensorShape{1, 64, true}}, *ParseCodec("quant:bits=2,vectors=same"));
  EXPECT_EQ(segs[0].scheme, Scheme::kQuant);
  EXPECT_EQ(CodecName(c), "quant:bits=2,chunk=4096");
  EXPECT_EQ(CodecName(*ParseCodec("lloyd:chunk=512")), "lloyd:bits=2,chunk=512");
  EXPECT_EQ(CodecName(*ParseCodec(CodecName(*ParseCodec("topk:k=8,bits=4,vectors=same")))),
            "topk:chunk=4096,k=8,bits=4,vectors=same");
}

// keep: codes for a seeded subset of min(k, length) elements per chunk, k = 0.9 * 4096
// rounded down to a multiple of 8; the rest stay in e untouched, and fresh seeds reach
// every element in a few rounds.
TEST(Codec, KeepSendsASeededSubsetOfEachChunk) {
  const CodecConfig c = *ParseCodec("lloyd:bits=2,chunk=4096,keep=0.9");
  EXPECT_EQ(CodecName(c), "lloyd:bits=2,chunk=4096,keep=0.9");
  EXPECT_EQ(PlanSegments({TensorShape{1, 8, false}}, *ParseCodec("lloyd:chunk=8,keep=0.5"))[0].k, 0u);  // k 8: all
  EXPECT_EQ(PlanSegments({TensorShape{1, 64, false}}, *ParseCodec("lloyd:chunk=64,keep=0.01"))[0].k, 8u);
  const size_t n = 3 * 4096 + 100;  // three full chunks and one of 100, all of it kept
  const std::vector<Segment> segs = PlanSegments({TensorShape{4, n, false}}, c);
  ASSERT_EQ(segs[0].k, 3680u);
  const std::vector<float> x = Random(n, 5);
  auto sent = [&](uint64_t seed, std::vector<float>* residual) {
    *residual = x;
    return Compress(segs, nullptr, 1.0f, residual->data(), seed);
  };
  std::vector<float> r1, r2, r3;
  const std::string p1 = sent(11, &r1), p2 = sent(11, &r2), p3 = sent(12, &r3);
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(r1, r2);
  const std::vector<float> y1 = Decode(p1, n), y3 = Decode(p3, n);
  size_t differ = 0;
  for (size_t c0 = 0; c0 < n; c0 += 4096) {
    size_t count = 0;
    for (size_t i = c0; i < std::min(n, c0 + 4096); ++i) {
      if (y1[i] == 0.0f) {
        ASSERT_EQ(r1[i], x[i]) << i;  // not sent: e untouched
      } else {
        ++count;
        ASSERT_NEAR(y1[i] + r1[i], x[i], 1e-6f * (1 + std::fabs(x[i]))) << i;
      }
      differ += (y1[i] == 0.0f) != (y3[i] == 0.0f);
    }
    EXPECT_EQ(count, std::min<size_t>(3680, n - c0)) << "chunk at " << c0;
  }
  EXPECT_GT(differ, 500u) << "another seed, another subset";
  // Error feedback over rounds with a new seed each: every element is sent within 8 rounds,
  // and decoded + residual = sum of inputs.
  std::vector<float> ef(n, 0.0f), decoded(n, 0.0f);
  std::vector<double> inputs(n, 0.0);
  std::vector<bool> reached(n, false);
  for (int r = 0; r < 8; ++r) {
    const std::vector<float> delta = Random(n, 400 + r, 0.01f);
    for (size_t i = 0; i < n; ++i) inputs[i] += delta[i];
    const std::vector<float> y = Decode(Compress(segs, delta.data(), 1.0f, ef.data(), 1000 + r), n);
    for (size_t i = 0; i < n; ++i) {
      decoded[i] += y[i];
      if (y[i] != 0.0f) reached[i] = true;
    }
  }
  EXPECT_EQ(std::count(reached.begin(), reached.end(), false), 0);
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(decoded[i] + ef[i], inputs[i], 1e-5) << i;
}

TEST(Codec, BadSpecsAreRefused) {
  for (const char* spec : {"lloyd:keep=0", "lloyd:keep=1.5", "lloyd:keep=x", "sign:keep=0.5", "topk:keep=0.5",
                           "gzip", "quant:bits=3", "quant:chunk=12", "topk:chunk=100", "topk:k=0", "topk:k=5000",
                           "sign:bits=2", "quant:bits=x", "quant:color=2", "linear:bits=16", "quant:vectors=maybe", "lloyd:bits=8"}) {
    EXPECT_EQ(ParseCodec(spec).status().code(), absl::StatusCode::kInvalidArgument) << spec;
  }
}

// Rewrites the checksum so that a corrupted field reaches the field's own validation.
void Reseal(std::string& p) {
  if (p.size() < 32) return;
  const uint64_t c = Checksum64(p.data() + 32, p.size() - 32, 0x626f6479ULL);
  std::memcpy(&p[24], &c, 8);
}

TEST(Codec, HostilePayloadsAreRejectedWithoutWrites) {
  const size_t n = 300;
  std::vector<float> x = Random(n, 7);
  std::vector<std::string> bad;
  for (const char* spec : kSpecs) {
    const std::string good = Encode(PlanSegments({TensorShape{1, n, false}}, *ParseCodec(spec)), x.data());
    for (size_t len = 0; len < good.size(); len += 5) bad.push_back(good.substr(0, len));  // truncations
    bad.push_back(good + "x");
    std::string p = good;
    p[40] ^= 0x1;  // flips a bit of the segment table: checksum catches it
    bad.push_back(p);
    for (size_t field = 32; field < 64; ++field) {  // every segment-table byte, resealed
      p = good;
      p[field] ^= 0x5a;
      Reseal(p);
      bad.push_back(p);
    }
  }
  std::string p;
  const std::string dense = Encode(DenseSegments(n), x.data());
  p = dense; p[0] = 'X'; bad.push_back(p);
  p = dense; p[4] = 1; bad.push_back(p);  // old format version
  p = dense; uint64_t huge = ~0ull; std::memcpy(&p[8], &huge, 8); bad.push_back(p);
  p = dense; std::memcpy(&p[16], &huge, 8); bad.push_back(p);
  p = dense; uint16_t segs = 9999; std::memcpy(&p[6], &segs, 2); Reseal(p); bad.push_back(p);
  std::vector<float> nan = x; nan[3] = NAN;
  bad.push_back(Encode(DenseSegments(n), nan.data()));
  // NaN in a quantizer table, a negative sign scale, unsorted and out-of-range top-k indices.
  p = Encode(PlanSegments({TensorShape{1, n, false}}, *ParseCodec("quant:bits=2,chunk=64")), x.data());
  float f = NAN; std::memcpy(&p[64 + 4], &f, 4); Reseal(p); bad.push_back(p);
  p = Encode(PlanSegments({TensorShape{1, n, false}}, *ParseCodec("sign:chunk=64")), x.data());
  f = -1.0f; std::memcpy(&p[64], &f, 4); Reseal(p); bad.push_back(p);
  const CodecConfig topk = *ParseCodec("topk:chunk=64,k=5,bits=32");
  const std::string tk = Encode(PlanSegments({TensorShape{1, n, false}}, topk), x.data());
  p = tk; p[64] = p[64] ^ 0x3f; Reseal(p); bad.push_back(p);  // the first index changes: order or range breaks
  {
    // Every 6-bit index of chunk 0 set to 63 then 0: not ascending.
    p = tk; p[64] = static_cast<char>(0xff); p[65] = static_cast<char>(0x0f); Reseal(p); bad.push_back(p);
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 300; ++i) {
    std::string r(rng() % 500, '\0');
    for (char& ch : r) ch = static_cast<char>(rng());
    if (i % 2 && r.size() >= 32) std::memcpy(&r[0], "MLCP\x02\x00", 6);
    bad.push_back(r);
  }
  size_t rejected = 0;
  for (const std::string& b : bad) {
    std::vector<float> sum(n, 1.0f);
    absl::Status s = DecodeAccumulate(b, n, sum.data());
    if (s.ok()) continue;  // a resealed byte can land on a harmless value (e.g. the same rows)
    ++rejected;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    for (float v : sum) ASSERT_EQ(v, 1.0f) << s;
  }
  EXPECT_GT(rejected, bad.size() * 9 / 10);
  std::vector<float> sum(n + 1, 0.0f);
  EXPECT_EQ(DecodeAccumulate(dense, n + 1, sum.data()).code(), absl::StatusCode::kInvalidArgument);
}

// The server's close: SumPayloads over threads must equal decoding the payloads one after
// another, bit for bit, with clipping scales; DecodedNorm equals the decoded vector's norm.
TEST(Codec, SumPayloadsMatchesSequentialDecodingForAnyThreadCount) {
  const std::vector<TensorShape> shapes = {{64, 64 * 48, false}, {1, 300, true}, {32, 1024, false}, {1, 7, true}, {128, 2048, false}};
  size_t n = 0;
  for (const TensorShape& t : shapes) n += t.numel;
  for (const char* spec : {"lloyd:bits=2,chunk=512", "topk:chunk=64,k=5,bits=2", "dense-fp32", "lloyd:bits=1,chunk=512,keep=0.8"}) {
    const std::vector<Segment> plan = PlanSegments(shapes, *ParseCodec(spec));
    std::vector<std::string> payloads;
    std::vector<WeightedPayload> weighted;
    std::vector<float> expected(n, 0.5f), scratch(n);
    for (int k = 0; k < 5; ++k) {
      payloads.push_back(Encode(plan, Random(n, 10 + k, 0.01f).data()));
    }
    for (int k = 0; k < 5; ++k) {
      const float scale = k == 3 ? 0.37f : 1.0f;
      weighted.push_back({payloads[k], scale});
      std::fill(scratch.begin(), scratch.end(), 0.0f);
      ASSERT_TRUE(DecodeAccumulate(payloads[k], n, scratch.data()).ok());
      double sq = 0;
      for (size_t i = 0; i < n; ++i) {
        expected[i] += scale == 1.0f ? scratch[i] : scale * scratch[i];
        sq += static_cast<double>(scratch[i]) * scratch[i];
      }
      absl::StatusOr<double> norm = DecodedNorm(payloads[k], n);
      ASSERT_TRUE(norm.ok()) << norm.status();
      EXPECT_DOUBLE_EQ(*norm, std::sqrt(sq)) << spec;
    }
    // Sequential reference for unit scales is DecodeAccumulate straight into the sum.
    std::vector<float> reference(n, 0.5f);
    for (int k = 0; k < 5; ++k) {
      if (weighted[k].scale == 1.0f) {
        ASSERT_TRUE(DecodeAccumulate(payloads[k], n, reference.data()).ok());
      } else {
        std::fill(scratch.begin(), scratch.end(), 0.0f);
        ASSERT_TRUE(DecodeAccumulate(payloads[k], n, scratch.data()).ok());
        for (size_t i = 0; i < n; ++i) reference[i] += weighted[k].scale * scratch[i];
      }
    }
    EXPECT_EQ(std::memcmp(reference.data(), expected.data(), n * sizeof(float)), 0);
    for (int threads : {1, 2, 3, 8}) {
      std::vector<float> sum(n, 0.5f);
      SumPayloads(weighted, n, sum.data(), threads);
      EXPECT_EQ(std::memcmp(sum.data(), reference.data(), n * sizeof(float)), 0) << spec << " threads " << threads;
    }
  }
  EXPECT_EQ(DecodedNorm("garbage", 10).status().code(), absl::StatusCode::kInvalidArgument);
}

// The server's downlink: Compress over threads writes the same bytes and residual.
TEST(Codec, CompressOnThreadsWritesTheSameBytes) {
  const std::vector<TensorShape> shapes = {{64, 64 * 48, false}, {1, 300, true}, {32, 1024, false}, {128, 2048, false}};
  size_t n = 0;
  for (const TensorShape& t : shapes) n += t.numel;
  for (const char* spec : {"lloyd:bits=2,chunk=512", "topk:chunk=64,k=5,bits=2", "sign:chunk=4096,vectors=same",
                           "quant:bits=2,chunk=512,keep=0.5"}) {
    const std::vector<Segment> plan = PlanSegments(shapes, *ParseCodec(spec));
    const std::vector<float> delta = Random(n, 3, 0.01f);
    std::vector<float> ef1 = Random(n, 4, 0.001f), ef3 = ef1;
    const std::string one = Compress(plan, delta.data(), 0.9f, ef1.data(), 77, 1);
    const std::string three = Compress(plan, delta.data(), 0.9f, ef3.data(), 77, 3);
    EXPECT_EQ(one, three) << spec;
    EXPECT_EQ(std::memcmp(ef1.data(), ef3.data(), n * sizeof(float)), 0) << spec;
  }
}

}  // namespace
}  // namespace muloco
