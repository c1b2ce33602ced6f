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

absl::Status Uplink::KeepUnlanded(const std::string& payload, const std::vector<LandedRange>& landed) {
  if (sign_vote_ || landed.empty()) return absl::OkStatus();
  const size_t n = ef_.size();
  for (const LandedRange& l : landed) {
    if (l.offset > n || l.count > n - l.offset || !(l.fraction >= 0.0f && l.fraction <= 1.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("landed range [", l.offset, ", +", l.count, ") fraction ",
                                                     l.fraction, " outside a model of ", n));
    }
  }
  absl::StatusOr<PayloadSegments> segments = PayloadSegments::Of(payload, n);
  if (!segments.ok()) return segments.status();  // our own payload: it decodes
  std::vector<float> e(n), part;
  ef_.Download(e.data());
  for (const LandedRange& l : landed) {
    part.assign(l.count, 0.0f);
    segments->DecodeRange(l.offset, l.count, part.data());
    const float keep = 1.0f - l.fraction;
    for (uint64_t j = 0; j < l.count; ++j) e[l.offset + j] += keep * part[j];
  }
  ef_.Upload(e.data());
  return absl::OkStatus();
}

void Uplink::Reset() { ef_.Zero(); }

double Uplink::ResidualNorm() const { return ef_.Norm(); }

std::vector<float> Uplink::residual() const {
  std::vector<float> e(ef_.size());
  ef_.Download(e.data());
  return e;
}

}  // namespace muloco
