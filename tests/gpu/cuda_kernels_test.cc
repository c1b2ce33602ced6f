// CUDA kernels against the CPU reference, bit for bit, on fresh random inputs with poisoned
// outputs; sizes 0, 1, C-1, C, C+1 and large. Skips when no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/bitpack.h"
#include "kernels/cuda/kernels.h"
#include "kernels/error_feedback.h"
#include "kernels/quantize.h"
#include "kernels/sign.h"
#include "kernels/subset.h"
#include "kernels/topk.h"

namespace muloco::kernels {
namespace {

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

template <typename T>
struct Dev {
  explicit Dev(size_t n, uint8_t poison = 0xab) : n(n) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
    cudaMemset(p, poison, std::max<size_t>(1, n) * sizeof(T));
  }
  Dev(const std::vector<T>& v) : Dev(v.size()) { cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice); }
  ~Dev() { cudaFree(p); }
  std::vector<T> Get() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
  T* p = nullptr;
  size_t n;
};

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng) * (1 + (rng() % 4));
  return v;
}

const size_t kChunk = 256;
const size_t kSizes[] = {0, 1, kChunk - 1, kChunk, kChunk + 1, 1000003};

TEST_F(Cuda, GaussianQuantizerMatchesCpu) {
  for (size_t n : kSizes) {
    for (int bits : {1, 2, 4}) {
      const std::vector<float> x = Random(n, n * 10 + bits + 100);
      const size_t chunks = (n + kChunk - 1) / kChunk, nb = NumBins(bits);
      std::vector<float> lut(chunks * nb);
      std::vector<uint8_t> codes(n);
      for (size_t c = 0; c < chunks; ++c) {
        const size_t len = std::min(kChunk, n - c * kChunk);
        cpu::GaussianQuantize(x.data() + c * kChunk, len, bits, lut.data() + c * nb, codes.data() + c * kChunk);
      }
      Dev<float> dx(x), dlut(chunks * nb);
      Dev<uint8_t> dcodes(n);
      ASSERT_TRUE(cuda::GaussianQuantizeChunks(dx.p, n, kChunk, bits, dlut.p, dcodes.p, nullptr).ok());
      EXPECT_EQ(dcodes.Get(), codes) << n << " " << bits;
      EXPECT_EQ(0, std::memcmp(dlut.Get().data(), lut.data(), lut.size() * 4)) << n << " " << bits;
    }
  }
  EXPECT_FALSE(cuda::GaussianQuantizeChunks(nullptr, 10, 256, 8, nullptr, nullptr, nullptr).ok());
}

TEST_F(Cuda, QuantizersMatchCpu) {
  for (size_t n : kSizes) {
    for (int bits : {1, 2, 4, 8}) {
      const std::vector<float> x = Random(n, n * 10 + bits);
      const size_t chunks = (n + kChunk - 1) / kChunk, nb = NumBins(bits);
      std::vector<float> lut(chunks * nb), lo(chunks), step(chunks);
      std::vector<uint8_t> codes(n), lcodes(n);
      for (size_t c = 0; c < chunks; ++c) {
        const size_t len = std::min(kChunk, n - c * kChunk);
        cpu::StatQuantize(x.data() + c * kChunk, len, bits, lut.data() + c * nb, codes.data() + c * kChunk);
        cpu::LinearQuantize(x.data() + c * kChunk, len, bits, &lo[c], &step[c], lcodes.data() + c * kChunk);
      }
      Dev<float> dx(x), dlut(chunks * nb), dlo(chunks), dstep(chunks);
      Dev<uint8_t> dcodes(n), dlcodes(n);
      ASSERT_TRUE(cuda::StatQuantizeChunks(dx.p, n, kChunk, bits, dlut.p, dcodes.p, nullptr).ok());
      ASSERT_TRUE(cuda::LinearQuantizeChunks(dx.p, n, kChunk, bits, dlo.p, dstep.p, dlcodes.p, nullptr).ok());
      EXPECT_EQ(dcodes.Get(), codes) << n << " " << bits;
      EXPECT_EQ(0, std::memcmp(dlut.Get().data(), lut.data(), lut.size() * 4)) << n << " " << bits;
      EXPECT_EQ(dlcodes.Get(), lcodes);
      EXPECT_EQ(dlo.Get(), lo);
      EXPECT_EQ(dstep.Get(), step);
      // Decode-accumulate.
      std::vector<float> sum = Random(n, 7), dsum_init = sum;
      for (size_t c = 0; c < chunks; ++c) {
        const size_t len = std::min(kChunk, n - c * kChunk);
        cpu::DequantizeAccumulate(lut.data() + c * nb, codes.data() + c * kChunk, len, sum.data() + c * kChunk);
      }
      Dev<float> dsum(dsum_init);
      ASSERT_TRUE(cuda::DequantizeAccumulateChunks(dlut.p, dcodes.p, n, kChunk, bits, 1.0f, dsum.p, nullptr).ok());
      EXPECT_EQ(dsum.Get(), sum);
      // Packing.
      std::vector<uint8_t> packed(PackedBytes(n, bits));
      cpu::PackCodes(codes.data(), n, bits, packed.data());
      Dev<uint8_t> dpacked(packed.size()), dunpacked(n);
      ASSERT_TRUE(cuda::PackCodes(dcodes.p, n, bits, dpacked.p, nullptr).ok());
      ASSERT_TRUE(cuda::UnpackCodes(dpacked.p, n, bits, dunpacked.p, nullptr).ok());
      EXPECT_EQ(dpacked.Get(), packed);
      EXPECT_EQ(dunpacked.Get(), codes);
    }
  }
}

TEST_F(Cuda, TopKMatchesCpu) {
  for (size_t chunk : {64u, 4096u}) {
    for (size_t n : {size_t{0}, size_t{1}, chunk - 1, chunk, chunk + 1, size_t{300000}}) {
      std::vector<float> x = Random(n, n + chunk);
      for (size_t i = 0; i + 3 < n; i += 7) x[i + 3] = -x[i];  // ties in magnitude
      const size_t k = 32;
      std::vector<uint32_t> idx;
      for (size_t off = 0; off < n; off += chunk) {
        const size_t len = std::min(chunk, n - off), kk = std::min(k, len);
        std::vector<uint32_t> part(kk);
        cpu::TopKChunk(x.data() + off, len, kk, part.data());
        idx.insert(idx.end(), part.begin(), part.end());
      }
      Dev<float> dx(x);
      Dev<uint32_t> didx(idx.size());
      ASSERT_TRUE(cuda::TopKChunks(dx.p, n, chunk, k, didx.p, nullptr).ok());
      EXPECT_EQ(didx.Get(), idx) << n << " " << chunk;
    }
  }
}

TEST_F(Cuda, SubsetsMatchCpu) {
  for (size_t chunk : {64u, 1000u, 4096u}) {
    for (size_t n : {size_t{0}, size_t{1}, chunk - 1, chunk, chunk + 1, size_t{300000}}) {
      const size_t k = chunk * 7 / 8, total = (n / chunk) * k + std::min(k, n % chunk);
      std::vector<uint32_t> idx(total);
      cpu::SubsetChunks(0xfeed + n, n, chunk, k, idx.data());
      Dev<uint32_t> didx(total);
      ASSERT_TRUE(cuda::SubsetChunks(0xfeed + n, n, chunk, k, didx.p, nullptr).ok());
      EXPECT_EQ(didx.Get(), idx) << n << " " << chunk;
    }
  }
}

TEST_F(Cuda, SignsVotesAndErrorFeedbackMatchCpu) {
  for (size_t n : kSizes) {
    std::vector<float> x = Random(n, n + 3);
    if (n > 2) x[1] = -0.0f, x[2] = 0.0f;
    std::vector<uint8_t> bits(PackedBytes(n, 1));
    cpu::SignPack(x.data(), n, n * 31, bits.data());
    const size_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<float> scale(chunks);
    for (size_t c = 0; c < chunks; ++c) scale[c] = cpu::MeanAbs(x.data() + c * kChunk, std::min(kChunk, n - c * kChunk));
    std::vector<int32_t> counts(n, 1);
    cpu::VoteAccumulate(bits.data(), n, counts.data());
    std::vector<float> vote(n);
    cpu::VoteSign(counts.data(), n, vote.data());
    std::vector<float> e = Random(n, 11), d = Random(n, 12), e_gpu = e;
    cpu::EfUpdate(e.data(), d.data(), n, 0.9f);

    Dev<float> dx(x), dscale(chunks), dvote(n), de(e_gpu), dd(d);
    Dev<uint8_t> dbits(bits.size());
    Dev<int32_t> dcounts(std::vector<int32_t>(n, 1));
    ASSERT_TRUE(cuda::SignPack(dx.p, n, n * 31, dbits.p, nullptr).ok());
    ASSERT_TRUE(cuda::MeanAbsChunks(dx.p, n, kChunk, dscale.p, nullptr).ok());
    ASSERT_TRUE(cuda::VoteAccumulate(dbits.p, n, dcounts.p, nullptr).ok());
    ASSERT_TRUE(cuda::VoteSign(dcounts.p, n, dvote.p, nullptr).ok());
    ASSERT_TRUE(cuda::EfUpdate(de.p, dd.p, n, 0.9f, nullptr).ok());
    EXPECT_EQ(dbits.Get(), bits);
    EXPECT_EQ(dscale.Get(), scale);
    EXPECT_EQ(dcounts.Get(), counts);
    EXPECT_EQ(dvote.Get(), vote);
    EXPECT_EQ(de.Get(), e);
  }
}

TEST_F(Cuda, PreconditionsAreErrorsNotCrashes) {
  EXPECT_FALSE(cuda::StatQuantizeChunks(nullptr, 10, 256, 3, nullptr, nullptr, nullptr).ok());
  EXPECT_FALSE(cuda::TopKChunks(nullptr, 10, 8192, 4, nullptr, nullptr).ok());
  EXPECT_FALSE(cuda::TopKChunks(nullptr, 10, 100, 4, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace muloco::kernels
