// The codec's CPU backend: kernels/cpu over host memory, chunk by chunk (codec_backend.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "codec/codec_backend.h"
#include "kernels/bf16.h"
#include "kernels/bitpack.h"
#include "kernels/error_feedback.h"
#include "kernels/quantize.h"
#include "kernels/sign.h"
#include "kernels/subset.h"
#include "kernels/topk.h"

namespace muloco {
namespace {

namespace kc = kernels::cpu;

class Cpu final : public CodecBackend {
 public:
  std::string Name() const override { return "cpu"; }
  bool OnHost() const override { return true; }
  bool SupportsTopKChunk(size_t) const override { return true; }

  absl::StatusOr<void*> Scratch(int slot, size_t bytes) override {
    thread_local std::vector<std::vector<uint64_t>> slots;  // 8-byte aligned
    if (slot < 0) return absl::InvalidArgumentError("negative scratch slot");
    if (slots.size() <= static_cast<size_t>(slot)) slots.resize(slot + 1);
    std::vector<uint64_t>& s = slots[slot];
    if (s.size() * 8 < bytes) s.resize((bytes + 7) / 8);
    return static_cast<void*>(s.data());
  }
  absl::Status BeginBody(char*, size_t) override { return absl::OkStatus(); }
  absl::Status Emit(char* out, size_t offset, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(out + offset, src, bytes);
    return absl::OkStatus();
  }
  absl::Status EndBody(char*) override { return absl::OkStatus(); }
  absl::Status EmitHost(char* out, size_t offset, const void* src, size_t bytes) override {
    return Emit(out, offset, src, bytes);
  }

  absl::Status EfUpdate(float* e, const float* delta, size_t n, float beta) override {
    kc::EfUpdate(e, delta, n, beta);
    return absl::OkStatus();
  }
  absl::Status Zero(float* x, size_t n) override {
    std::fill(x, x + n, 0.0f);
    return absl::OkStatus();
  }
  absl::Status Bf16Encode(float* e, size_t n, uint16_t* out) override {
    kc::Bf16Encode(e, n, out);
    return absl::OkStatus();
  }
  absl::Status Quantize(Quantizer q, const float* x, size_t n, size_t chunk, int bits, float* meta,
                        uint8_t* codes) override {
    const size_t per = q == Quantizer::kLinear ? 2 : kernels::NumBins(bits);
    for (size_t off = 0, c = 0; off < n; off += chunk, ++c) {
      const size_t len = std::min(chunk, n - off);
      float* m = meta + c * per;
      switch (q) {
        case Quantizer::kStat: kc::StatQuantize(x + off, len, bits, m, codes + off); break;
        case Quantizer::kGaussian: kc::GaussianQuantize(x + off, len, bits, m, codes + off); break;
        case Quantizer::kLinear: kc::LinearQuantize(x + off, len, bits, m, m + 1, codes + off); break;
      }
    }
    return absl::OkStatus();
  }
  absl::Status Dequantize(Quantizer q, const float* meta, const uint8_t* codes, size_t n, size_t chunk, int bits,
                          float factor, float* sum) override {
    const int nbins = kernels::NumBins(bits);
    const size_t per = q == Quantizer::kLinear ? 2 : nbins;
    float lut[256];
    for (size_t off = 0, c = 0; off < n; off += chunk, ++c) {
      const float* m = meta + c * per;
      if (q == Quantizer::kLinear) {
        kernels::LinearTable(m[0], m[1], bits, lut);
      } else {
        std::memcpy(lut, m, nbins * sizeof(float));
      }
      for (int b = 0; b < nbins; ++b) lut[b] *= factor;
      kc::DequantizeAccumulate(lut, codes + off, std::min(chunk, n - off), sum + off);
    }
    return absl::OkStatus();
  }
  absl::Status Lookup(const float* lut, const uint8_t* codes, size_t n, float* out) override {
    for (size_t i = 0; i < n; ++i) out[i] = lut[codes[i]];
    return absl::OkStatus();
  }
  absl::Status PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out) override {
    kc::PackCodes(codes, n, bits, out);
    return absl::OkStatus();
  }
  absl::Status PackIndices(const uint32_t* idx, size_t n, int bits, uint8_t* out) override {
    kc::PackIndices(idx, n, bits, out);
    return absl::OkStatus();
  }
  absl::Status TopK(const float* x, size_t n, size_t chunk, size_t k, uint32_t* idx) override {
    for (size_t off = 0; off < n; off += chunk) {
      const size_t kept = std::min(k, std::min(chunk, n - off));
      kc::TopKChunk(x + off, std::min(chunk, n - off), kept, idx);
      idx += kept;
    }
    return absl::OkStatus();
  }
  absl::Status Gather(const float* x, size_t n, size_t chunk, size_t k, const uint32_t* idx, float* vals) override {
    kc::GatherChunks(x, n, chunk, k, idx, vals);
    return absl::OkStatus();
  }
  absl::Status Subset(uint32_t seed, size_t n, size_t chunk, size_t k, uint32_t* idx) override {
    kc::SubsetChunks(seed, n, chunk, k, idx);
    return absl::OkStatus();
  }
  absl::Status Scatter(const float* vals, size_t n, size_t chunk, size_t k, const uint32_t* idx, float factor,
                       float* sum) override {
    kc::ScatterAccumulateChunks(vals, n, chunk, k, idx, factor, sum);
    return absl::OkStatus();
  }
  absl::Status MeanAbs(const float* x, size_t n, size_t chunk, float* scales) override {
    for (size_t off = 0, c = 0; off < n; off += chunk, ++c) scales[c] = kc::MeanAbs(x + off, std::min(chunk, n - off));
    return absl::OkStatus();
  }
  absl::Status SignPack(const float* x, size_t n, uint64_t seed, uint8_t* out) override {
    kc::SignPack(x, n, seed, out);
    return absl::OkStatus();
  }
  absl::Status SignAccumulate(const uint8_t* bits, const float* scales, size_t n, size_t chunk, float factor,
                              float* sum) override {
    for (size_t off = 0, c = 0; off < n; off += chunk, ++c) {
      kc::SignAccumulate(bits + off / 8, std::min(chunk, n - off), factor * scales[c], sum + off);
    }
    return absl::OkStatus();
  }
};

}  // namespace

CodecBackend& CpuBackend() {
  static Cpu cpu;
  return cpu;
}

}  // namespace muloco
