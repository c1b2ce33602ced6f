// Server checkpoints: everything needed to continue a run (open round, run configuration,
// θ_true, θ_pub — their difference is the downlink's error feedback — and the outer momentum).
// Written atomically (temporary file, fsync, rename, fsync of the directory), the newest K
// kept; loading skips truncated or corrupt files with a log line and never crashes.
//
// File: "MLCK" | u32 version 3 | u64 open round | u64 joins | u64 config bytes | RunConfig (protobuf) |
//       u64 layout bytes | ModelLayout (protobuf) | u64 n | n fp32 θ_true | n fp32 θ_pub |
//       u64 m (0 or n) | m fp32 momentum | u64 xxh64 of every byte before it.
// (Version 2 had no layout, read as empty: the run config's GPT; version 1 had no joins
// field either, read as 0 joins.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "muloco/v1/muloco.pb.h"

namespace muloco {

struct ServerState {
  uint64_t open_round = 0;
  uint64_t joins = 0;  // the engine's join counter: data orders already handed out
  v1::RunConfig config;
  v1::ModelLayout layout;  // the run's tensors and groups
  std::vector<float> theta_true, theta_pub, momentum;
  std::vector<float> delayed_sum;  // Delayed Nesterov's (OuterSgd); empty without it
  uint32_t delayed_steps = 0;
};

// Writes dir/ckpt-<round>.bin atomically and deletes all but the newest `keep` checkpoints.
absl::Status WriteCheckpoint(const std::string& dir, const ServerState& state, size_t keep);

// The newest checkpoint in dir that reads back whole; NOT_FOUND when there is none.
absl::StatusOr<ServerState> LoadNewestCheckpoint(const std::string& dir);

// Parses one checkpoint file's bytes (DATA_LOSS with the reason when it is damaged).
absl::StatusOr<ServerState> ParseCheckpoint(const std::string& bytes);
std::string SerializeCheckpoint(const ServerState& state);

}  // namespace muloco
