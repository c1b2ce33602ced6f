// Uplink (see uplink.h).
#include "worker/uplink.h"

#include <cstdio>
#include <cstdlib>

#include <torch/cuda.h>

#include "absl/strings/str_cat.h"

namespace muloco {

Uplink::Uplink(std::vector<Segment> plan, bool sign_vote, float ef_beta, size_t n, uint64_t worker_seed,
               const ComputeDevice& device)
    : plan_(std::move(plan)), sign_vote_(sign_vote), beta_(ef_beta), worker_seed_(worker_seed),
      device_index_(device.index), ef_(device, sign_vote ? 0 : n), staged_(device, sign_vote ? 0 : n) {
  if (device.cuda) {
    absl::StatusOr<std::unique_ptr<CodecBackend>> b = MakeCudaBackend(device.index);
    if (!b.ok()) {  // ResolveDevice checked that it is usable: this is a bug
      std::fprintf(stderr, "uplink: %s\n", b.status().ToString().c_str());
      std::abort();
    }
    cuda_ = std::move(*b);
    for (const Segment& s : plan_) {
      if (s.scheme == Scheme::kTopK && !cuda_->SupportsTopKChunk(s.chunk)) {
        status_ = absl::FailedPreconditionError(
            absl::StrCat("the uplink codec's top-k over chunks of ", s.chunk, " (ratio=) cannot be encoded on ",
                         cuda_->Name(), " (chunks up to 4096 can); use --device=cpu or topk:chunk=N,k=K"));
      }
    }
  }
}

Uplink::~Uplink() = default;

absl::StatusOr<std::string> Uplink::Encode(float* delta, uint64_t round) {
  if (!status_.ok()) return status_;
  if (!sign_vote_) staged_.CopyFrom(ef_);  // compress into a copy: a refused push leaves e as it was
  // LibTorch's stream wrote delta and the staged copy; the codec's CUDA backend has its own.
  if (cuda_) torch::cuda::synchronize(device_index_);
  CodecBackend& backend = cuda_ ? *cuda_ : CpuBackend();
  // Sign ties' coins and `keep` subsets: different on every worker and in every round.
  const uint64_t seed = (worker_seed_ + 1) * 0x9E3779B97F4A7C15ULL ^ round * 0xC2B2AE3D27D4EB4FULL;
  if (sign_vote_) return Compress(backend, plan_, nullptr, 1.0f, delta, seed);
  return Compress(backend, plan_, delta, beta_, staged_.data(), seed);  // returns once e is written
}

void Uplink::Commit() {
  if (!sign_vote_) std::swap(ef_, staged_);
}

void Uplink::Reset() { ef_.Zero(); }

double Uplink::ResidualNorm() const { return ef_.Norm(); }

std::vector<float> Uplink::residual() const {
  std::vector<float> e(ef_.size());
  ef_.Download(e.data());
  return e;
}

}  // namespace muloco
