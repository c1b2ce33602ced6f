// Checkpoints: round trip, keep-K pruning, and truncated or bit-flipped files skipped in
// favour of the newest good one; no good file is NOT_FOUND, never a crash.
#include "server/checkpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "codec/checksum.h"
#include "common/run_config.h"

namespace muloco {
namespace {

std::string Dir(const char* name) {
  std::string d = std::string(::testing::TempDir()) + "/muloco_ckpt_" + name + "_" + std::to_string(getpid());
  EXPECT_EQ(std::system(("rm -rf " + d + " && mkdir -p " + d).c_str()), 0);
  return d;
}

ServerState State(uint64_t round) {
  ServerState s;
  s.open_round = round;
  s.config = DefaultRunConfig();
  v1::TensorSpec* t = s.layout.add_tensors();
  t->set_name("model.w");
  t->add_shape(10);
  t->add_shape(100);
  t->set_group(v1::TENSOR_GROUP_MUON);
  for (int i = 0; i < 1000; ++i) {
    s.theta_true.push_back(i * 0.5f + round);
    s.theta_pub.push_back(i * 0.5f);
    s.momentum.push_back(-i * 0.25f);
    s.delayed_sum.push_back(i * 0.125f);
  }
  s.delayed_steps = 2;
  return s;
}

std::string Path(const std::string& dir, uint64_t round) {
  char name[64];
  std::snprintf(name, sizeof name, "/ckpt-%012llu.bin", static_cast<unsigned long long>(round));
  return dir + name;
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Checkpoint, RoundTripAndKeepNewest) {
  const std::string d = Dir("keep");
  for (uint64_t r = 1; r <= 5; ++r) ASSERT_TRUE(WriteCheckpoint(d, State(r), 3).ok());
  EXPECT_FALSE(std::ifstream(Path(d, 2)).good());
  EXPECT_TRUE(std::ifstream(Path(d, 3)).good());
  absl::StatusOr<ServerState> s = LoadNewestCheckpoint(d);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->open_round, 5u);
  EXPECT_EQ(s->theta_true, State(5).theta_true);
  EXPECT_EQ(s->theta_pub, State(5).theta_pub);
  EXPECT_EQ(s->momentum, State(5).momentum);
  EXPECT_EQ(s->delayed_sum, State(5).delayed_sum);
  EXPECT_EQ(s->delayed_steps, 2u);
  EXPECT_EQ(s->config.SerializeAsString(), DefaultRunConfig().SerializeAsString());
  EXPECT_EQ(s->layout.SerializeAsString(), State(5).layout.SerializeAsString());
}

// A version-2 file (before the layout was kept) reads with an empty layout: the config's GPT.
TEST(Checkpoint, ReadsTheVersionBeforeTheLayout) {
  const ServerState want = State(4);
  std::string b = "MLCK";
  auto put = [&](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  const uint32_t version = 2;
  const uint64_t round = 4, joins = 3, n = want.theta_true.size(), m = want.momentum.size();
  const std::string config = want.config.SerializeAsString();
  const uint64_t config_len = config.size();
  put(&version, 4), put(&round, 8), put(&joins, 8), put(&config_len, 8), b += config;
  put(&n, 8), put(want.theta_true.data(), 4 * n), put(want.theta_pub.data(), 4 * n);
  put(&m, 8), put(want.momentum.data(), 4 * m);
  const uint64_t sum = Checksum64(b.data(), b.size(), 0x636b7074ULL);
  put(&sum, 8);
  absl::StatusOr<ServerState> s = ParseCheckpoint(b);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->joins, 3u);
  EXPECT_EQ(s->layout.tensors_size(), 0);
  EXPECT_EQ(s->theta_pub, want.theta_pub);
  EXPECT_TRUE(s->delayed_sum.empty());  // nor Delayed Nesterov's state (version 4)
  EXPECT_EQ(s->delayed_steps, 0u);
}

TEST(Checkpoint, DamagedFilesAreSkipped) {
  const std::string d = Dir("damaged");
  for (uint64_t r = 1; r <= 3; ++r) ASSERT_TRUE(WriteCheckpoint(d, State(r), 5).ok());
  // Truncate the newest, flip one bit in the next: the oldest is the newest good one.
  const std::string newest = Read(Path(d, 3));
  std::ofstream(Path(d, 3), std::ios::binary | std::ios::trunc).write(newest.data(), newest.size() / 2);
  std::string middle = Read(Path(d, 2));
  middle[middle.size() / 3] ^= 0x04;
  std::ofstream(Path(d, 2), std::ios::binary | std::ios::trunc).write(middle.data(), middle.size());
  absl::StatusOr<ServerState> s = LoadNewestCheckpoint(d);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->open_round, 1u);
  EXPECT_EQ(ParseCheckpoint(newest.substr(0, newest.size() / 2)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseCheckpoint(middle).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseCheckpoint("").status().code(), absl::StatusCode::kDataLoss);
  std::ofstream(Path(d, 1), std::ios::binary | std::ios::trunc) << "garbage";
  EXPECT_EQ(LoadNewestCheckpoint(d).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadNewestCheckpoint(d + "/missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(Checkpoint, EveryTruncationIsRejected) {
  const std::string bytes = SerializeCheckpoint(State(7));
  for (size_t len = 0; len < bytes.size(); len += 97) {
    EXPECT_FALSE(ParseCheckpoint(bytes.substr(0, len)).ok()) << len;
  }
  EXPECT_TRUE(ParseCheckpoint(bytes).ok());
}

}  // namespace
}  // namespace muloco
