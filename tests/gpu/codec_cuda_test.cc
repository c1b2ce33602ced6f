// The codec's CUDA backend against its CPU backend: for every scheme, two error-feedback
// rounds on the device give the same payload bytes and the same residual, bit for bit, as
// on the host; plans the device cannot encode fail with a clear Status. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "codec/codec_backend.h"

namespace muloco {
namespace {

// A matrix, a gain vector, a matrix not a multiple of the chunks, a larger matrix.
const std::vector<TensorShape> kShapes = {
    {48, 48 * 100, false}, {1, 100, true}, {37, 37 * 64, false}, {256, 256 * 1024, false}};

const char* kSpecs[] = {
    "dense-fp32", "dense-bf16", "quant:bits=1,chunk=64", "quant:bits=2,chunk=512", "quant:bits=4,chunk=64",
    "quant:bits=8,chunk=64", "lloyd:bits=1,chunk=4096,vectors=same", "lloyd:bits=2,chunk=512", "lloyd:bits=4,chunk=64",
    "linear:bits=2,chunk=64", "linear:bits=8,chunk=64,vectors=same", "topk:chunk=64,k=5,bits=2",
    "topk:chunk=64,k=5,bits=32", "topk:chunk=4096,k=32,bits=2,vectors=same", "sign:chunk=64",
    "sign:chunk=1024,vectors=same", "lloyd:bits=1,chunk=4096,keep=0.9,vectors=same", "quant:bits=2,chunk=64,keep=0.5"};

// Heavy-tailed inputs with exact zeros (sign coins) and repeats (top-k ties).
std::vector<float> Input(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> t(3.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i % 11 == 5 ? 0.0f : i % 13 == 7 ? 0.25f : 0.01f * t(rng);
  return v;
}

struct Device {
  float* p = nullptr;
  explicit Device(const std::vector<float>& h) {
    EXPECT_EQ(cudaMalloc(&p, h.size() * 4 + 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the backend's own stream does not wait for this copy
  }
  ~Device() { cudaFree(p); }
  std::vector<float> Get(size_t n) const {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

class CodecCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::unique_ptr<CodecBackend>> b = MakeCudaBackend(0);
    ASSERT_TRUE(b.ok()) << b.status();
    cuda_ = std::move(*b);
  }
  std::unique_ptr<CodecBackend> cuda_;
};

TEST_F(CodecCuda, SameBytesAndResidualsAsTheCpu) {
  size_t n = 0;
  for (const TensorShape& t : kShapes) n += t.numel;
  for (const char* spec : kSpecs) {
    const std::vector<Segment> plan = PlanSegments(kShapes, *ParseCodec(spec));
    std::vector<float> ef(n, 0.0f);
    Device dev_ef(ef);
    for (int round = 0; round < 2; ++round) {
      const std::vector<float> delta = Input(n, 100 + round);
      Device dev_delta(delta);
      const std::string want = Compress(plan, delta.data(), 0.9f, ef.data(), 77 * round);
      absl::StatusOr<std::string> got = Compress(*cuda_, plan, dev_delta.p, 0.9f, dev_ef.p, 77 * round);
      ASSERT_TRUE(got.ok()) << spec << ": " << got.status();
      ASSERT_EQ(got->size(), want.size()) << spec;
      EXPECT_TRUE(*got == want) << spec << " round " << round << ": payload bytes differ";
      const std::vector<float> residual = dev_ef.Get(n);
      EXPECT_EQ(0, std::memcmp(residual.data(), ef.data(), n * 4)) << spec << " round " << round << ": residual differs";
    }
  }
}

TEST_F(CodecCuda, TopKOverChunksBeyondTheDeviceKernelIsAClearError) {
  const std::vector<Segment> plan = PlanSegments({{1, 100000, false}}, *ParseCodec("topk:ratio=0.01,bits=2"));
  std::vector<float> x = Input(100000, 5);
  Device dev(x);
  absl::StatusOr<std::string> got = Compress(*cuda_, plan, nullptr, 1.0f, dev.p);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnimplemented) << got.status();
}

}  // namespace
}  // namespace muloco
