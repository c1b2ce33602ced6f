// GPU kernel throughput next to a device-to-device copy of the same buffer, in one run:
// GB/s on the fp32 input and the ratio to the copy (aim: >= 0.5 for quantize, sign, EF).
// Usage: cuda_speed [elements, default 64M]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "kernels/bitpack.h"
#include "kernels/cuda/kernels.h"

using namespace muloco::kernels;

namespace {

float TimeMs(const std::function<void()>& op, int reps = 10) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  op();  // warm up
  cudaEventRecord(a);
  for (int i = 0; i < reps; ++i) op();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms / reps;
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda::DeviceCount() == 0) {
    std::printf("cuda_speed: no CUDA device\n");
    return 0;
  }
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (64u << 20);
  const size_t chunk = 4096, chunks = (n + chunk - 1) / chunk;
  float *x, *y, *lut, *scale;
  uint8_t *codes, *packed;
  uint32_t* idx;
  int32_t* counts;
  cudaMalloc(&x, n * 4);
  cudaMalloc(&y, n * 4);
  cudaMalloc(&lut, chunks * 256 * 4);
  cudaMalloc(&scale, chunks * 4);
  cudaMalloc(&codes, n);
  cudaMalloc(&packed, n);
  cudaMalloc(&idx, chunks * 32 * 4);
  cudaMalloc(&counts, n * 4);
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  cudaMemcpy(x, host.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemset(y, 0, n * 4);
  cudaMemset(counts, 0, n * 4);

  const float copy = TimeMs([&] { cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice); });
  struct Row { const char* name; std::function<void()> op; };
  const std::vector<Row> rows = {
      {"stat quantize 2-bit", [&] { cuda::StatQuantizeChunks(x, n, chunk, 2, lut, codes, nullptr).IgnoreError(); }},
      {"gaussian (lloyd) quantize 2-bit", [&] { cuda::GaussianQuantizeChunks(x, n, chunk, 2, lut, codes, nullptr).IgnoreError(); }},
      {"linear quantize 2-bit", [&] { cuda::LinearQuantizeChunks(x, n, chunk, 2, lut, scale, codes, nullptr).IgnoreError(); }},
      {"pack codes 2-bit", [&] { cuda::PackCodes(codes, n, 2, packed, nullptr).IgnoreError(); }},
      {"dequantize-accumulate", [&] { cuda::DequantizeAccumulateChunks(lut, codes, n, chunk, 2, 1.0f, y, nullptr).IgnoreError(); }},
      {"sign pack", [&] { cuda::SignPack(x, n, 1, packed, nullptr).IgnoreError(); }},
      {"vote accumulate", [&] { cuda::VoteAccumulate(packed, n, counts, nullptr).IgnoreError(); }},
      {"error feedback", [&] { cuda::EfUpdate(y, x, n, 0.9f, nullptr).IgnoreError(); }},
      {"top-k 32/4096", [&] { cuda::TopKChunks(x, n, chunk, 32, idx, nullptr).IgnoreError(); }},
  };
  std::printf("elements %zu (%.0f MB fp32); device-to-device copy %.3f ms = %.1f GB/s\n", n, n * 4 / 1e6, copy,
              n * 4 / copy / 1e6);
  std::printf("%-24s %10s %10s %10s\n", "kernel", "ms", "GB/s", "vs copy");
  for (const Row& r : rows) {
    const float ms = TimeMs(r.op);
    std::printf("%-24s %10.3f %10.1f %10.2f\n", r.name, ms, n * 4 / ms / 1e6, copy / ms);
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("cuda_speed: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
