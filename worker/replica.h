// A worker's replica of the public model θ_pub: fetched whole, then advanced round by round
// by decoding the server's downlink payload into it, each step verified against the
// server's checksum, so every replica stays bit-identical to the server's θ_pub.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/transport.h"

namespace muloco {

class Replica {
 public:
  // Takes a fetched (checksum-verified) model.
  void Reset(FetchedModel model) { model_ = std::move(model); }
  // θ_pub += decode(update.payload), then checks the server's checksum; on success the
  // replica is at update.next_round. On failure (bad payload, checksum mismatch) the
  // parameters are unusable: fetch the model again (Reset).
  absl::Status Apply(const RoundResult& update);

  uint64_t round() const { return model_.round; }
  uint64_t checksum() const { return model_.checksum; }
  const std::vector<float>& params() const { return model_.params; }
  size_t size() const { return model_.params.size(); }

 private:
  FetchedModel model_;
};

}  // namespace muloco
