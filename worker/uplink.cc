// Uplink (see uplink.h).
#include "worker/uplink.h"

#include <algorithm>
#include <cmath>

namespace muloco {

Uplink::Uplink(std::vector<Segment> plan, bool sign_vote, float ef_beta, size_t n, uint64_t worker_seed)
    : plan_(std::move(plan)), sign_vote_(sign_vote), beta_(ef_beta), worker_seed_(worker_seed),
      ef_(sign_vote ? 0 : n, 0.0f) {}

std::string Uplink::Encode(float* delta, uint64_t round) {
  if (sign_vote_) {
    const uint64_t tie_seed = (worker_seed_ + 1) * 0x9E3779B97F4A7C15ULL ^ round * 0xC2B2AE3D27D4EB4FULL;
    return Compress(plan_, nullptr, 1.0f, delta, tie_seed);
  }
  staged_ = ef_;  // compress into a copy: a refused push leaves e as it was
  return Compress(plan_, delta, beta_, staged_.data());
}

void Uplink::Commit() {
  if (!sign_vote_) ef_.swap(staged_);
}

void Uplink::Reset() { std::fill(ef_.begin(), ef_.end(), 0.0f); }

double Uplink::ResidualNorm() const {
  double s = 0;
  for (float v : ef_) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

}  // namespace muloco
