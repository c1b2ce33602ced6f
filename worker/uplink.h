// The uplink's encoder and its error-feedback state e. DiLoCo/MuLoCo: e ← β·e + Δ, payload
// = C(e), e ← e − decode(payload), so what compression drops is sent in later rounds.
// SignMuon: the payload is the signs of the direction (no feedback); exactly-zero elements
// get coins seeded by this worker and round, so that workers do not all vote alike for them.
// Encode stages the new e; Commit adopts it once the server accepted the push, so a refused
// push loses nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/codec.h"

namespace muloco {

class Uplink {
 public:
  // `worker_seed` distinguishes workers' tie coins (SignMuon).
  Uplink(std::vector<Segment> plan, bool sign_vote, float ef_beta, size_t n, uint64_t worker_seed);

  // The payload for `round`'s pseudo-gradient (or SignMuon direction) `delta`. May modify
  // `delta` (SignMuon encodes it in place).
  std::string Encode(float* delta, uint64_t round);
  // The push was accepted: e takes the value Encode staged.
  void Commit();
  // e ← 0 (after training went bad and the worker starts over from the server's model).
  void Reset();
  // ‖e‖₂ (0 for SignMuon).
  double ResidualNorm() const;
  // e (empty for SignMuon).
  const std::vector<float>& residual() const { return ef_; }

 private:
  const std::vector<Segment> plan_;
  const bool sign_vote_;
  const float beta_;
  const uint64_t worker_seed_;
  std::vector<float> ef_, staged_;
};

}  // namespace muloco
