// The uplink's encoder and its error-feedback state e. DiLoCo/MuLoCo: e ← β·e + Δ, payload
// = C(e), e ← e − decode(payload), so what compression drops is sent in later rounds.
// SignMuon: the payload is the signs of the direction (no feedback); exactly-zero elements
// get coins seeded by this worker and round, so that workers do not all vote alike for them.
// Encode stages the new e; Commit adopts it once the server accepted the push, so a refused
// push loses nothing; where the server's screening counted only part of it (LandedRange),
// KeepUnlanded puts the rest back into e. On a GPU, e, its staged copy and the encoder stay on the device (the
// codec's CUDA backend); only the payload comes to the host.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codec/codec.h"
#include "common/landed.h"
#include "worker/device.h"
#include "worker/device_floats.h"

namespace muloco {

class Uplink {
 public:
  // `worker_seed` distinguishes workers' tie coins (SignMuon). On a CUDA device the codec's
  // CUDA backend must be usable (ResolveDevice checked it).
  Uplink(std::vector<Segment> plan, bool sign_vote, float ef_beta, size_t n, uint64_t worker_seed,
         const ComputeDevice& device = {});
  ~Uplink();
  // OK, or why this plan cannot be encoded on the device (e.g. top-k over chunks larger than
  // the CUDA kernel takes): check before training.
  const absl::Status& status() const { return status_; }

  // The payload for `round`'s pseudo-gradient (or SignMuon direction) `delta`, in the
  // device's memory (host memory on the CPU). May modify `delta` (SignMuon encodes it in
  // place). Errors: the device's (a failed CUDA call).
  absl::StatusOr<std::string> Encode(float* delta, uint64_t round);
  // The push was accepted: e takes the value Encode staged.
  void Commit();
  // The committed push `payload` counted only in part: e += (1 - fraction) · decode(payload)
  // over each range. INVALID_ARGUMENT (nothing changed) for a range outside the model or a
  // fraction outside [0, 1], or a payload that does not decode. No-op for SignMuon.
  absl::Status KeepUnlanded(const std::string& payload, const std::vector<LandedRange>& landed);
  // e ← 0 (after training went bad and the worker starts over from the server's model).
  void Reset();
  // ‖e‖₂ (0 for SignMuon).
  double ResidualNorm() const;
  // e, copied to the host (empty for SignMuon).
  std::vector<float> residual() const;

 private:
  const std::vector<Segment> plan_;
  const bool sign_vote_;
  const float beta_;
  const uint64_t worker_seed_;
  const int device_index_;
  std::unique_ptr<CodecBackend> cuda_;  // null on the CPU
  absl::Status status_;
  DeviceFloats ef_, staged_;
};

}  // namespace muloco
