// The codec's CUDA backend: kernels/cuda on one stream of one device (codec_backend.h).
// Payload bytes leave the device through a pinned host buffer, one asynchronous copy per
// part, waited for once per payload. Built with MULOCO_WITH_CUDA; otherwise MakeCudaBackend
// says why there is none.
#include "codec/codec_backend.h"

#ifdef MULOCO_WITH_CUDA
#include <cuda_runtime.h>

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/kernels.h"
#endif

namespace muloco {

#ifndef MULOCO_WITH_CUDA
absl::StatusOr<std::unique_ptr<CodecBackend>> MakeCudaBackend(int, void*) {
  return absl::UnavailableError("this build has no CUDA (configure where nvcc is found, with -DMULOCO_CUDA=ON)");
}
int CudaDeviceCount() { return 0; }
#else
namespace {

namespace kcu = kernels::cuda;

absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("CUDA ", what, ": ", cudaGetErrorString(e)));
}

// Scratch slots of the backend's own (the codec's are small numbers).
constexpr int kLoSlot = 1000, kStepSlot = 1001;

class Cuda final : public CodecBackend {
 public:
  Cuda(int device, cudaStream_t stream, bool own) : device_(device), stream_(stream), own_stream_(own) {}
  Cuda(const Cuda&) = delete;
  Cuda& operator=(const Cuda&) = delete;
  ~Cuda() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    for (auto& [slot, buf] : scratch_) cudaFree(buf.first);
    if (pinned_) cudaFreeHost(pinned_);
    if (own_stream_) cudaStreamDestroy(stream_);
  }

  std::string Name() const override { return absl::StrCat("cuda:", device_); }
  bool OnHost() const override { return false; }
  bool SupportsTopKChunk(size_t chunk) const override { return chunk <= 4096; }

  absl::StatusOr<void*> Scratch(int slot, size_t bytes) override {
    std::pair<void*, size_t>& buf = scratch_[slot];
    if (buf.second >= bytes && buf.first) return buf.first;
    // Copies and kernels queued on the stream may still read the old buffer.
    if (absl::Status s = Check(cudaStreamSynchronize(stream_), "synchronize"); !s.ok()) return s;
    if (buf.first) cudaFree(buf.first);
    buf = {nullptr, 0};
    const size_t grown = bytes + bytes / 4 + 256;
    if (absl::Status s = Check(cudaMalloc(&buf.first, grown), "cudaMalloc scratch"); !s.ok()) return s;
    buf.second = grown;
    return buf.first;
  }
  absl::Status BeginBody(char* out, size_t bytes) override {
    if (absl::Status s = Check(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    if (pinned_bytes_ < bytes) {
      if (absl::Status s = Check(cudaStreamSynchronize(stream_), "synchronize"); !s.ok()) return s;
      if (pinned_) cudaFreeHost(pinned_);
      pinned_ = nullptr;
      pinned_bytes_ = 0;
      if (absl::Status s = Check(cudaMallocHost(&pinned_, bytes), "cudaMallocHost"); !s.ok()) return s;
      pinned_bytes_ = bytes;
    }
    body_bytes_ = bytes;
    return absl::OkStatus();
  }
  absl::Status Emit(char*, size_t offset, const void* src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (absl::Status s = InBody(offset, bytes); !s.ok()) return s;
    return Check(cudaMemcpyAsync(static_cast<char*>(pinned_) + offset, src, bytes, cudaMemcpyDeviceToHost, stream_),
                 "copy to host");
  }
  absl::Status EmitHost(char*, size_t offset, const void* src, size_t bytes) override {
    if (absl::Status s = InBody(offset, bytes); !s.ok()) return s;
    if (bytes) std::memcpy(static_cast<char*>(pinned_) + offset, src, bytes);  // no copy in flight writes here
    return absl::OkStatus();
  }
  absl::Status EndBody(char* out) override {
    if (absl::Status s = Check(cudaStreamSynchronize(stream_), "synchronize"); !s.ok()) return s;
    std::memcpy(out, pinned_, body_bytes_);  // the header part is rewritten by the codec
    return absl::OkStatus();
  }

  absl::Status EfUpdate(float* e, const float* delta, size_t n, float beta) override {
    return kcu::EfUpdate(e, delta, n, beta, stream_);
  }
  absl::Status Zero(float* x, size_t n) override {
    return Check(cudaMemsetAsync(x, 0, n * sizeof(float), stream_), "memset");  // +0.0f
  }
  absl::Status Bf16Encode(float* e, size_t n, uint16_t* out) override { return kcu::Bf16Encode(e, n, out, stream_); }
  absl::Status Quantize(Quantizer q, const float* x, size_t n, size_t chunk, int bits, float* meta,
                        uint8_t* codes) override {
    if (q == Quantizer::kStat) return kcu::StatQuantizeChunks(x, n, chunk, bits, meta, codes, stream_);
    if (q == Quantizer::kGaussian) return kcu::GaussianQuantizeChunks(x, n, chunk, bits, meta, codes, stream_);
    const size_t nc = chunk ? (n + chunk - 1) / chunk : 0;
    if (nc == 0) return absl::OkStatus();
    absl::StatusOr<void*> lo = Scratch(kLoSlot, nc * 4), step = Scratch(kStepSlot, nc * 4);
    if (!lo.ok()) return lo.status();
    if (!step.ok()) return step.status();
    float* lo_p = static_cast<float*>(*lo);
    float* step_p = static_cast<float*>(*step);
    if (absl::Status s = kcu::LinearQuantizeChunks(x, n, chunk, bits, lo_p, step_p, codes, stream_); !s.ok()) return s;
    // (lo, step) pairs per chunk, as the payload holds them.
    if (absl::Status s = Check(cudaMemcpy2DAsync(meta, 8, lo_p, 4, 4, nc, cudaMemcpyDeviceToDevice, stream_), "interleave");
        !s.ok()) {
      return s;
    }
    return Check(cudaMemcpy2DAsync(meta + 1, 8, step_p, 4, 4, nc, cudaMemcpyDeviceToDevice, stream_), "interleave");
  }
  absl::Status Dequantize(Quantizer q, const float* meta, const uint8_t* codes, size_t n, size_t chunk, int bits,
                          float factor, float* sum) override {
    if (q == Quantizer::kLinear) return kcu::DequantizeLinearChunks(meta, codes, n, chunk, factor, sum, stream_);
    return kcu::DequantizeAccumulateChunks(meta, codes, n, chunk, bits, factor, sum, stream_);
  }
  absl::Status Lookup(const float* lut, const uint8_t* codes, size_t n, float* out) override {
    return kcu::Lookup(lut, codes, n, out, stream_);
  }
  absl::Status PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out) override {
    return kcu::PackCodes(codes, n, bits, out, stream_);
  }
  absl::Status PackIndices(const uint32_t* idx, size_t n, int bits, uint8_t* out) override {
    return kcu::PackIndices(idx, n, bits, out, stream_);
  }
  absl::Status TopK(const float* x, size_t n, size_t chunk, size_t k, uint32_t* idx) override {
    return kcu::TopKChunks(x, n, chunk, k, idx, stream_);
  }
  absl::Status Gather(const float* x, size_t n, size_t chunk, size_t k, const uint32_t* idx, float* vals) override {
    return kcu::GatherChunks(x, n, chunk, k, idx, vals, stream_);
  }
  absl::Status Subset(uint32_t seed, size_t n, size_t chunk, size_t k, uint32_t* idx) override {
    return kcu::SubsetChunks(seed, n, chunk, k, idx, stream_);
  }
  absl::Status Scatter(const float* vals, size_t n, size_t chunk, size_t k, const uint32_t* idx, float factor,
                       float* sum) override {
    return kcu::ScatterAccumulateChunks(vals, n, chunk, k, idx, factor, sum, stream_);
  }
  absl::Status MeanAbs(const float* x, size_t n, size_t chunk, float* scales) override {
    return kcu::MeanAbsChunks(x, n, chunk, scales, stream_);
  }
  absl::Status SignPack(const float* x, size_t n, uint64_t seed, uint8_t* out) override {
    return kcu::SignPack(x, n, seed, out, stream_);
  }
  absl::Status SignAccumulate(const uint8_t* bits, const float* scales, size_t n, size_t chunk, float factor,
                              float* sum) override {
    return kcu::SignAccumulateChunks(bits, scales, n, chunk, factor, sum, stream_);
  }

 private:
  // bytes at offset lie inside the payload body being staged.
  absl::Status InBody(size_t offset, size_t bytes) const {
    if (offset > body_bytes_ || bytes > body_bytes_ - offset) return absl::InternalError("codec: emit past the payload");
    return absl::OkStatus();
  }
  int device_;
  cudaStream_t stream_;
  bool own_stream_;
  std::map<int, std::pair<void*, size_t>> scratch_;  // slot -> (device buffer, bytes)
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
  size_t body_bytes_ = 0;
};

}  // namespace

int CudaDeviceCount() { return kcu::DeviceCount(); }

absl::StatusOr<std::unique_ptr<CodecBackend>> MakeCudaBackend(int device, void* stream) {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("the codec's CUDA runtime finds no device: ", cudaGetErrorString(e)));
  }
  if (device < 0 || device >= count) {
    return absl::UnavailableError(absl::StrCat("no CUDA device ", device, " (", count, " usable)"));
  }
  if (absl::Status s = Check(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return absl::UnavailableError(s.message());
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const bool own = st == nullptr;
  if (own) {
    if (absl::Status s = Check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream"); !s.ok()) {
      return absl::UnavailableError(s.message());
    }
  }
  return std::unique_ptr<CodecBackend>(new Cuda(device, st, own));
}
#endif

}  // namespace muloco
