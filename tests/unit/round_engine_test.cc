// Round engine with several in-process workers (threads): quorum, deadlines, joins, leaves,
// evictions and every rejected push.
#include "server/round_engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "codec/checksum.h"

namespace muloco {
namespace {

std::string DensePayload(const std::vector<float>& v) { return Encode(DenseSegments(v.size()), v.data()); }

struct Fixture {
  explicit Fixture(EngineOptions o = Defaults(), size_t n = 4)
      : init(n, 1.0f), engine(o, init, &clock) {}
  static EngineOptions Defaults() {
    EngineOptions o;
    o.outer = OuterSgdOptions{1.0f, 0.0f, false};  // plain averaging: easy to check
    o.round_timeout_s = 10;
    o.heartbeat_timeout_s = 5;
    return o;
  }
  std::vector<float> init;
  FakeClock clock;
  RoundEngine engine;
};

TEST(RoundEngine, ClosesWhenAllWorkersPushAndAverages) {
  Fixture f;
  auto a = f.engine.Join("a"), b = f.engine.Join("b");
  EXPECT_EQ(a.join_index, 0u);  // join order, not the random id, seeds each worker's data
  EXPECT_EQ(b.join_index, 1u);
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 2, 3, 4})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 0u);  // b still missing
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({3, 2, 1, 0})).ok());
  auto u = f.engine.AwaitRound(0, 0);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->contributors, 2u);
  EXPECT_EQ(u->next_round, 1u);
  ModelSnapshot s = f.engine.Snapshot();
  EXPECT_EQ(s.round, 1u);
  // θ = 1 − mean(Δ) = 1 − 2 = −1 everywhere.
  for (float v : *s.params) EXPECT_FLOAT_EQ(v, -1.0f);
  EXPECT_EQ(u->checksum, ParamChecksum(s.params->data(), s.params->size()));
  // Applying the downlink payload to the old public copy reproduces the new one bit for bit.
  std::vector<float> replica = f.init;
  ASSERT_TRUE(DecodeAccumulate(*u->payload, replica.size(), replica.data()).ok());
  EXPECT_EQ(ParamChecksum(replica.data(), replica.size()), u->checksum);
}

TEST(RoundEngine, ThreadsAcrossManyRoundsStayConsistent) {
  for (int workers : {1, 2, 3, 8}) {
    Fixture f;
    std::vector<uint64_t> ids;
    for (int w = 0; w < workers; ++w) ids.push_back(f.engine.Join("w").worker_id);
    const int rounds = 5;
    std::vector<std::thread> threads;
    std::vector<uint64_t> final_checksum(workers);
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        std::vector<float> replica = f.init;
        for (int r = 0; r < rounds; ++r) {
          std::vector<float> delta(4, 0.01f * (w + 1));
          ASSERT_TRUE(f.engine.Push(ids[w], r, DensePayload(delta)).ok());
          auto u = f.engine.AwaitRound(r, 30);
          ASSERT_TRUE(u.ok()) << u.status();
          ASSERT_EQ(u->contributors, static_cast<uint32_t>(workers));
          ASSERT_TRUE(DecodeAccumulate(*u->payload, 4, replica.data()).ok());
          ASSERT_EQ(ParamChecksum(replica.data(), 4), u->checksum);
        }
        final_checksum[w] = ParamChecksum(replica.data(), 4);
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(f.engine.Stats().rounds_closed, static_cast<uint64_t>(rounds));
    for (int w = 0; w < workers; ++w) EXPECT_EQ(final_checksum[w], f.engine.Snapshot().checksum);
  }
}

TEST(RoundEngine, MinQuorumHoldsRoundOpenEvenPastDeadline) {
  EngineOptions o = Fixture::Defaults();
  o.min_quorum = 2;
  Fixture f(o);
  auto a = f.engine.Join("a");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 1, 1, 1})).ok());
  f.clock.Advance(100);
  f.engine.Heartbeat(a.worker_id).IgnoreError();
  f.engine.Tick();
  EXPECT_EQ(f.engine.Stats().open_round, 0u);
  auto b = f.engine.Join("b");  // a late joiner may still contribute to the open round
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({1, 1, 1, 1})).ok());
  f.engine.Tick();
  EXPECT_EQ(f.engine.Stats().open_round, 1u);
}

TEST(RoundEngine, DeadlineClosesRoundWithoutStraggler) {
  EngineOptions o = Fixture::Defaults();
  o.heartbeat_timeout_s = 100;  // both stay members; only the deadline is at play
  Fixture f(o);
  auto a = f.engine.Join("a"), b = f.engine.Join("slow");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({2, 2, 2, 2})).ok());
  f.clock.Advance(9);
  f.engine.Tick();
  EXPECT_EQ(f.engine.Stats().open_round, 0u);
  f.clock.Advance(2);
  f.engine.Heartbeat(b.worker_id).IgnoreError();
  f.engine.Tick();
  auto u = f.engine.AwaitRound(0, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->contributors, 1u);
  for (float v : *f.engine.Snapshot().params) EXPECT_FLOAT_EQ(v, -1.0f);
  // The straggler's late push is refused with a resync status and changes nothing.
  const uint64_t before = f.engine.Snapshot().checksum;
  absl::Status late = f.engine.Push(b.worker_id, 0, DensePayload({9, 9, 9, 9}));
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.engine.Snapshot().checksum, before);
  EXPECT_EQ(f.engine.Stats().rejected_wrong_round, 1u);
  // Having missed a round it was expected in, it is not waited for until its backoff (2
  // rounds after the miss) has passed, however it pushes; it may push in any open round.
  ASSERT_TRUE(f.engine.Push(a.worker_id, 1, DensePayload({0, 0, 0, 1e-3f})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 2u);
  ASSERT_TRUE(f.engine.Push(b.worker_id, 2, DensePayload({0, 0, 0, 1e-3f})).ok());  // on time, within its backoff
  ASSERT_TRUE(f.engine.Push(a.worker_id, 2, DensePayload({0, 0, 0, 1e-3f})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 3u);
  ASSERT_TRUE(f.engine.Push(a.worker_id, 3, DensePayload({0, 0, 0, 1e-3f})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 4u);  // not waited for b
  ASSERT_TRUE(f.engine.Push(b.worker_id, 4, DensePayload({0, 0, 0, 1e-3f})).ok());  // past its backoff: proven
  ASSERT_TRUE(f.engine.Push(a.worker_id, 4, DensePayload({0, 0, 0, 1e-3f})).ok());
  ASSERT_TRUE(f.engine.Push(a.worker_id, 5, DensePayload({0, 0, 0, 1e-3f})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 5u);  // waits for b
  ASSERT_TRUE(f.engine.Push(b.worker_id, 5, DensePayload({0, 0, 0, 1e-3f})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 6u);
}

// A worker that pushes the moment a round opens (a hostile volunteer sending noise) must not
// start the straggler clock for everyone: it starts once half the expected workers pushed.
TEST(RoundEngine, AnEarlyMinorityCannotStartTheStragglerClock) {
  EngineOptions o = Fixture::Defaults();  // round_timeout_s 10
  o.heartbeat_timeout_s = 1000;           // everyone stays a member; only the deadlines are at play
  Fixture f(o);
  auto h0 = f.engine.Join("h0"), h1 = f.engine.Join("h1"), m = f.engine.Join("early");
  for (auto* w : {&h0, &h1, &m}) ASSERT_TRUE(f.engine.Push(w->worker_id, 0, DensePayload({0, 0, 0, 1e-3f})).ok());
  ASSERT_EQ(f.engine.Stats().open_round, 1u);  // all three proven: three expected
  ASSERT_TRUE(f.engine.Push(m.worker_id, 1, DensePayload({1, 1, 1, 1})).ok());
  f.clock.Advance(15);  // past round_timeout_s after the early push
  f.engine.Tick();
  EXPECT_EQ(f.engine.Stats().open_round, 1u);  // 1 of 3 is not half: still waiting
  ASSERT_TRUE(f.engine.Push(h0.worker_id, 1, DensePayload({1, 1, 1, 1})).ok());  // 2 of 3: the clock starts
  f.clock.Advance(9);
  f.engine.Tick();
  EXPECT_EQ(f.engine.Stats().open_round, 1u);
  ASSERT_TRUE(f.engine.Push(h1.worker_id, 1, DensePayload({1, 1, 1, 1})).ok());  // in time
  auto u = f.engine.AwaitRound(1, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->contributors, 3u);
  // Round 2: h1 is a real straggler; it gets round_timeout_s after the clock starts.
  ASSERT_TRUE(f.engine.Push(m.worker_id, 2, DensePayload({1, 1, 1, 1})).ok());
  f.clock.Advance(5);
  ASSERT_TRUE(f.engine.Push(h0.worker_id, 2, DensePayload({1, 1, 1, 1})).ok());
  f.clock.Advance(9.5);
  f.engine.Tick();
  EXPECT_EQ(f.engine.Stats().open_round, 2u);
  f.clock.Advance(1);
  f.engine.Tick();
  u = f.engine.AwaitRound(2, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->contributors, 2u);
}

// A majority that stays alive (heartbeats) but never pushes does not hold a round open
// forever: kBackstopTimeouts x round_timeout_s after the first push, it closes.
TEST(RoundEngine, AHungMajorityIsClosedByTheBackstop) {
  EngineOptions o = Fixture::Defaults();
  o.heartbeat_timeout_s = 1000;
  Fixture f(o);
  auto a = f.engine.Join("a"), b = f.engine.Join("hung1"), c = f.engine.Join("hung2");
  (void)b, (void)c;
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 1, 1, 1})).ok());
  const double backstop = RoundEngine::kBackstopTimeouts * o.round_timeout_s;
  f.clock.Advance(backstop - 0.5);
  f.engine.Tick();
  EXPECT_EQ(f.engine.Stats().open_round, 0u);
  f.clock.Advance(1);
  f.engine.Tick();
  auto u = f.engine.AwaitRound(0, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->contributors, 1u);
}

TEST(RoundEngine, JoinMidRunCatchesUpAndContributes) {
  Fixture f;
  auto a = f.engine.Join("a");
  for (uint64_t r = 0; r < 2; ++r) ASSERT_TRUE(f.engine.Push(a.worker_id, r, DensePayload({1, 0, 0, 0})).ok());
  auto c = f.engine.Join("late");
  EXPECT_EQ(c.round, 2u);
  EXPECT_EQ(c.checksum, f.engine.Snapshot().checksum);
  // A joiner in a running run is not waited for until it has pushed a valid update once
  // (ids that join and never push must not hold rounds open), but it may push at once.
  ASSERT_TRUE(f.engine.Push(a.worker_id, 2, DensePayload({1, 0, 0, 0})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 3u);
  // Its valid but late push proves it: it is expected from round 4 on (round 3 opened
  // before that push, without it).
  EXPECT_EQ(f.engine.Push(c.worker_id, 2, DensePayload({3, 0, 0, 0})).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(f.engine.Push(a.worker_id, 3, DensePayload({1, 0, 0, 0})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 4u);
  ASSERT_TRUE(f.engine.Push(a.worker_id, 4, DensePayload({1, 0, 0, 0})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 4u);  // waits for c now
  ASSERT_TRUE(f.engine.Push(c.worker_id, 4, DensePayload({1.25f, 0, 0, 0})).ok());
  auto u = f.engine.AwaitRound(4, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->contributors, 2u);
  EXPECT_FLOAT_EQ((*f.engine.Snapshot().params)[0], 1.0f - 1 - 1 - 1 - 1 - 1.125f);
}

TEST(RoundEngine, APushWhoseReplyWasLostIsADuplicateNotAStaleRound) {
  Fixture f;
  auto a = f.engine.Join("a");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());  // closes round 0
  // The worker retries (its reply was lost): the server has it, error feedback must stay committed.
  EXPECT_EQ(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).code(), absl::StatusCode::kAlreadyExists);
}

TEST(RoundEngine, AStallingProvenIdHoldsFewRoundsOpen) {
  Fixture f;
  auto a = f.engine.Join("a"), s = f.engine.Join("stall");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
  auto wait_out = [&] {  // past the round's deadline; both stay alive
    f.clock.Advance(11);
    f.engine.Heartbeat(a.worker_id).IgnoreError();
    f.engine.Heartbeat(s.worker_id).IgnoreError();
    f.engine.Tick();
  };
  wait_out();  // round 0's deadline: s missed it
  int held_open = 0;
  for (uint64_t r = 1; r < 40; ++r) {
    // s proves itself with a valid push for the round that just closed, whenever it may...
    EXPECT_EQ(f.engine.Push(s.worker_id, r - 1, DensePayload({0, 0, 0, 1e-3f})).code(),
              absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE(f.engine.Push(a.worker_id, r, DensePayload({0, 0, 0, 1e-3f})).ok());
    if (f.engine.Stats().open_round == r) {  // ...and then stalls the rounds it is expected in
      ++held_open;
      wait_out();
    }
    ASSERT_EQ(f.engine.Stats().open_round, r + 1);
  }
  EXPECT_EQ(held_open, 4);  // rounds 4, 10, 20, 38: waits of 4, 8, 16 rounds between its chances
}

TEST(RoundEngine, ZeroUpdatesCannotStopTrainingThroughScreening) {
  Fixture f;
  auto a = f.engine.Join("a"), z1 = f.engine.Join("zero1"), z2 = f.engine.Join("zero2");
  for (uint64_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(f.engine.Push(z1.worker_id, r, DensePayload({0, 0, 0, 0})).ok());
    ASSERT_TRUE(f.engine.Push(z2.worker_id, r, DensePayload({0, 0, 0, 0})).ok());
    ASSERT_TRUE(f.engine.Push(a.worker_id, r, DensePayload({0, 3, 0, 0})).ok());
  }
  // Zeros are left out of the statistics and of the mean: a's update is applied in full,
  // neither clipped to zero nor diluted.
  EXPECT_FLOAT_EQ((*f.engine.Snapshot().params)[1], 1.0f - 3 * 3.0f);
}

// An empty update does not complete the quorum: the round waits for a real one (else a
// volunteer pushing zeros first would close it without the honest workers).
TEST(RoundEngine, ZeroPushesDoNotMakeAQuorum) {
  EngineOptions o = Fixture::Defaults();
  o.min_quorum = 2;
  Fixture f(o);
  auto a = f.engine.Join("a"), b = f.engine.Join("b"), z = f.engine.Join("zero");
  ASSERT_TRUE(f.engine.Push(z.worker_id, 0, DensePayload({0, 0, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
  f.clock.Advance(50);  // past every deadline
  for (auto* w : {&a, &b, &z}) f.engine.Heartbeat(w->worker_id).IgnoreError();
  f.engine.Tick();
  EXPECT_EQ(f.engine.Stats().open_round, 0u);  // one real update: no quorum yet
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 1u);
}

TEST(RoundEngine, ARoundHoldsBoundedPayloadBytes) {
  EngineOptions o = Fixture::Defaults();
  o.max_round_bytes = 150;  // one 4-float dense payload is 80 bytes
  o.min_quorum = 3;
  Fixture f(o, 4);
  auto a = f.engine.Join("a"), b = f.engine.Join("b"), c = f.engine.Join("c");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
  EXPECT_EQ(f.engine.Push(b.worker_id, 0, DensePayload({1, 0, 0, 0})).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(f.engine.Stats().rejected_round_full, 1u);
  (void)c;
}

TEST(RoundEngine, SybilsThatNeverPushAreNotWaitedFor) {
  Fixture f;
  auto a = f.engine.Join("a");
  auto b = f.engine.Join("b");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
  for (int i = 0; i < 50; ++i) f.engine.Join("sybil");  // join, heartbeat, never push
  ASSERT_TRUE(f.engine.Push(a.worker_id, 1, DensePayload({1, 0, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(b.worker_id, 1, DensePayload({1, 0, 0, 0})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 2u);  // closed without waiting for the round timeout
}

TEST(RoundEngine, JoinAfterFirstPushIsNotWaitedFor) {
  Fixture f;
  auto a = f.engine.Join("a"), b = f.engine.Join("b");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 1, 1, 1})).ok());
  f.engine.Join("c");
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({1, 1, 1, 1})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 1u);
}

TEST(RoundEngine, LeaveShrinksTheQuorum) {
  Fixture f;
  auto a = f.engine.Join("a"), b = f.engine.Join("b");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 1, 1, 1})).ok());
  ASSERT_TRUE(f.engine.Leave(b.worker_id).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 1u);
  EXPECT_EQ(f.engine.Leave(b.worker_id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.engine.Push(b.worker_id, 1, DensePayload({1, 1, 1, 1})).code(), absl::StatusCode::kNotFound);
}

TEST(RoundEngine, SilentWorkerIsEvictedAndRoundCloses) {
  Fixture f;
  auto a = f.engine.Join("a"), dead = f.engine.Join("dead");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 1, 1, 1})).ok());
  f.clock.Advance(3);
  ASSERT_TRUE(f.engine.Heartbeat(a.worker_id).ok());
  f.clock.Advance(3);
  f.engine.Tick();  // dead silent 6 s > 5 s
  EngineStats s = f.engine.Stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.live_workers, 1u);
  EXPECT_EQ(s.open_round, 1u);
  EXPECT_EQ(f.engine.Heartbeat(dead.worker_id).code(), absl::StatusCode::kNotFound);
}

TEST(RoundEngine, BadPushesAreRejectedAndChangeNothing) {
  Fixture f;
  auto a = f.engine.Join("a"), b = f.engine.Join("b");
  const std::vector<float> ok = {1, 1, 1, 1};
  EXPECT_EQ(f.engine.Push(999, 0, DensePayload(ok)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.engine.Push(a.worker_id, 5, DensePayload(ok)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.engine.Push(a.worker_id, 0, DensePayload({1, 1, 1})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.engine.Push(a.worker_id, 0, DensePayload({1, NAN, 1, 1})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.engine.Push(a.worker_id, 0, DensePayload({1, INFINITY, 1, 1})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.engine.Push(a.worker_id, 0, "garbage").code(), absl::StatusCode::kInvalidArgument);
  std::string corrupt = DensePayload(ok);
  corrupt.back() ^= 1;
  EXPECT_EQ(f.engine.Push(a.worker_id, 0, corrupt).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload(ok)).ok());
  EXPECT_EQ(f.engine.Push(a.worker_id, 0, DensePayload(ok)).code(), absl::StatusCode::kAlreadyExists);
  EngineStats s = f.engine.Stats();
  EXPECT_EQ(s.rejected_unknown_worker, 1u);
  EXPECT_EQ(s.rejected_wrong_round, 1u);
  EXPECT_EQ(s.rejected_bad_payload, 5u);
  EXPECT_EQ(s.rejected_duplicate, 1u);
  // The round still closes on b's push with exactly the two good contributions.
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({3, 3, 3, 3})).ok());
  for (float v : *f.engine.Snapshot().params) EXPECT_FLOAT_EQ(v, 1.0f - 2.0f);
}

TEST(RoundEngine, FinalRoundEndsTheRunAndOldRoundsNeedResync) {
  EngineOptions o = Fixture::Defaults();
  o.total_rounds = 3;
  o.keep_rounds = 1;
  Fixture f(o);
  auto a = f.engine.Join("a");
  for (uint64_t r = 0; r < 3; ++r) ASSERT_TRUE(f.engine.Push(a.worker_id, r, DensePayload({0, 0, 0, 1e-3f})).ok());
  auto last = f.engine.AwaitRound(2, 0);
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->done);
  EXPECT_TRUE(f.engine.Stats().done);
  EXPECT_EQ(f.engine.AwaitRound(0, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.engine.AwaitRound(3, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.engine.Push(a.worker_id, 3, DensePayload({0, 0, 0, 1e-3f})).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(RoundEngine, AwaitOpenRoundTimesOutWithDeadlineExceeded) {
  Fixture f;
  f.engine.Join("a");
  EXPECT_EQ(f.engine.AwaitRound(0, 0.01).status().code(), absl::StatusCode::kDeadlineExceeded);
}

// SignMuon: θ ← θ − lr · sign(Σ_k sign(d_k)), ties (even worker counts) moving nothing.
TEST(RoundEngine, MajorityVoteStepEqualsItsFormula) {
  const size_t n = 203;
  const std::vector<Segment> signs = PlanSegments({TensorShape{7, 203, false}}, *ParseCodec("sign:chunk=64"));
  for (int workers : {1, 2, 3, 4, 5, 6}) {
    EngineOptions o = Fixture::Defaults();
    o.aggregation = Aggregation::kVote;
    o.outer = OuterSgdOptions{0.01f, 0.0f, false};
    Fixture f(o, n);
    std::vector<uint64_t> ids;
    for (int w = 0; w < workers; ++w) ids.push_back(f.engine.Join("w").worker_id);
    std::vector<int> sum(n, 0);
    std::mt19937 rng(workers);
    for (int w = 0; w < workers; ++w) {
      std::vector<float> d(n);
      for (float& v : d) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000);
      for (size_t i = 0; i < n; ++i) sum[i] += d[i] >= 0 ? 1 : -1;
      ASSERT_TRUE(f.engine.Push(ids[w], 0, Encode(signs, d.data())).ok());
    }
    const std::vector<float>& theta = *f.engine.Snapshot().params;
    size_t ties = 0;
    for (size_t i = 0; i < n; ++i) {
      const float vote = sum[i] > 0 ? 1.0f : (sum[i] < 0 ? -1.0f : 0.0f);
      ASSERT_EQ(theta[i], 1.0f - 0.01f * vote) << workers << " workers, i " << i;
      ties += sum[i] == 0;
    }
    EXPECT_EQ(ties > 0, workers % 2 == 0) << workers;  // odd counts never tie
  }
}

// SignMuon with the inner schedule and decoupled decay: at round r, lr_r = lr · factor(r),
// θ ← θ · (1 − lr_r · rate) on decayed ranges, then θ ← θ − lr_r · vote.
TEST(RoundEngine, VoteStepFollowsTheScheduleAndDecays) {
  const size_t n = 64;
  const std::vector<Segment> signs = PlanSegments({TensorShape{8, n, false}}, *ParseCodec("sign:chunk=64"));
  EngineOptions o = Fixture::Defaults();
  o.aggregation = Aggregation::kVote;
  o.outer = OuterSgdOptions{0.01f, 0.0f, false};
  o.vote_lr_factor = [](uint64_t round) { return round == 0 ? 1.0 : 0.25; };
  o.vote_decay = {DecayRange{8, 16, 2.0f}};  // elements 8..23 decay; the rest do not
  Fixture f(o, n);
  const uint64_t id = f.engine.Join("w").worker_id;
  std::vector<double> expect(n, 1.0);
  for (uint64_t round = 0; round < 2; ++round) {
    std::vector<float> d(n);
    for (size_t i = 0; i < n; ++i) d[i] = (i + round) % 3 == 0 ? -1.0f : 1.0f;
    ASSERT_TRUE(f.engine.Push(id, round, Encode(signs, d.data())).ok());
    const double lr = 0.01 * (round == 0 ? 1.0 : 0.25);
    for (size_t i = 0; i < n; ++i) {
      if (i >= 8 && i < 24) expect[i] *= 1.0 - lr * 2.0;
      expect[i] -= lr * (d[i] > 0 ? 1.0 : -1.0);
    }
    const std::vector<float>& theta = *f.engine.Snapshot().params;
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(theta[i], expect[i], 1e-6) << "round " << round << ", i " << i;
  }
  EXPECT_NE(expect[8], expect[8 + 24]);  // the decayed range differs from an undecayed twin
}

TEST(RoundEngine, VoteRoundsRefuseNonSignPayloads) {
  EngineOptions o = Fixture::Defaults();
  o.aggregation = Aggregation::kVote;
  Fixture f(o);
  auto a = f.engine.Join("a");
  EXPECT_EQ(f.engine.Push(a.worker_id, 0, DensePayload({1, 2, 3, 4})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.engine.Stats().rejected_bad_payload, 1u);
}

TEST(RoundEngine, ScreeningClipsAnOutlierToTheRobustThreshold) {
  Fixture f(Fixture::Defaults(), 4);
  auto a = f.engine.Join("a"), b = f.engine.Join("b"), c = f.engine.Join("evil");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({0, 1, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(c.worker_id, 0, DensePayload({0, 0, 1000, 0})).ok());  // x1000
  // Norms 1, 1, 1000: median 1, so the threshold is the median: c counts as 1.
  const std::vector<float> p = *f.engine.Snapshot().params;
  EXPECT_FLOAT_EQ(p[0], 1.0f - 1.0f / 3);
  EXPECT_FLOAT_EQ(p[1], 1.0f - 1.0f / 3);
  EXPECT_FLOAT_EQ(p[2], 1.0f - 1.0f / 3);
  EXPECT_FLOAT_EQ(p[3], 1.0f);
  const EngineStats st = f.engine.Stats();
  ASSERT_EQ(st.screened.count("evil"), 1u);
  EXPECT_EQ(st.screened.at("evil").clipped, 1u);
  EXPECT_EQ(st.screened.count("a"), 0u);
}

TEST(RoundEngine, ScreeningRejectLeavesTheOutlierOut) {
  EngineOptions o = Fixture::Defaults();
  o.screen.mode = Robust::kReject;
  Fixture f(o, 4);
  auto a = f.engine.Join("a"), b = f.engine.Join("b"), c = f.engine.Join("evil");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(c.worker_id, 0, DensePayload({0, 0, -5000, 0})).ok());
  auto u = f.engine.AwaitRound(0, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->contributors, 2u);
  const std::vector<float> p = *f.engine.Snapshot().params;
  EXPECT_FLOAT_EQ(p[0], 0.0f);
  EXPECT_FLOAT_EQ(p[2], 1.0f);
  EXPECT_EQ(f.engine.Stats().screened.at("evil").rejected, 1u);
}

TEST(RoundEngine, ScreeningUsesPreviousRoundsWhenTheQuorumIsSmall) {
  Fixture f(Fixture::Defaults(), 4);
  auto a = f.engine.Join("a");
  for (uint64_t r = 0; r < 3; ++r) ASSERT_TRUE(f.engine.Push(a.worker_id, r, DensePayload({0.5f, 0, 0, 0})).ok());
  // Alone in round 3, a x1000 push is clipped against the history: 2 x 0.5, the scale at its
  // growth limit.
  ASSERT_TRUE(f.engine.Push(a.worker_id, 3, DensePayload({0.5f, 500, 0, 0})).ok());
  const std::vector<float> p = *f.engine.Snapshot().params;
  EXPECT_NEAR(p[1], 1.0f - 1.0f * 500 / std::hypot(0.5f, 500.0f), 1e-5);
  EXPECT_EQ(f.engine.Stats().screened.at("a").clipped, 1u);
}

// Sessions that name one participant (a token's label) are one vote: their updates are
// averaged into one, whatever their number.
TEST(RoundEngine, ATokensSessionsAreOneVote) {
  Fixture f(Fixture::Defaults(), 4);
  auto a = f.engine.Join("a", "site-a"), b = f.engine.Join("b", "site-b");
  std::vector<RoundEngine::Joined> sybils;
  for (int i = 0; i < 3; ++i) sybils.push_back(f.engine.Join("s", "mallory"));
  // (Once any session of a participant pushed, the participant is in: the sessions push first
  // here, or the round would close without the others.)
  for (auto& s : sybils) ASSERT_TRUE(f.engine.Push(s.worker_id, 0, DensePayload({1, 1, 0.3f, 0})).ok());
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 1, 0, 0.3f})).ok());  // the same norm: none clipped
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({1, 1, 0, 0.3f})).ok());
  auto u = f.engine.AwaitRound(0, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->contributors, 3u);  // three participants, not five
  const std::vector<float> p = *f.engine.Snapshot().params;
  EXPECT_FLOAT_EQ(p[2], 1.0f - 0.3f / 3);  // mallory's one vote among three
  const EngineStats st = f.engine.Stats();
  EXPECT_EQ(st.participants, 3u);
  EXPECT_EQ(st.uncounted_pushes, 2u);
}

TEST(RoundEngine, AParticipantsWeightScalesItsVote) {
  EngineOptions o = Fixture::Defaults();
  o.screen.mode = Robust::kOff;
  Fixture f(o, 2);
  auto a = f.engine.Join("a", "trusted", 3.0f), b = f.engine.Join("b", "volunteer");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0})).ok());
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({0, 1})).ok());
  const std::vector<float> p = *f.engine.Snapshot().params;
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.75f);
  EXPECT_FLOAT_EQ(p[1], 1.0f - 0.25f);
}

// An update opposed to the round's robust reference is left out, and its session is told so
// (all of it did not land); zeros are left out too instead of diluting the mean.
TEST(RoundEngine, OpposedAndEmptyUpdatesDoNotCountAndAreTold) {
  Fixture f(Fixture::Defaults(), 4);
  auto a = f.engine.Join("a"), b = f.engine.Join("b"), e = f.engine.Join("evil"), z = f.engine.Join("zero");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0.2f, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({1, -0.2f, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(e.worker_id, 0, DensePayload({-1.2f, 0, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(z.worker_id, 0, DensePayload({0, 0, 0, 0})).ok());
  auto u = f.engine.AwaitRound(0, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->contributors, 2u);
  const std::vector<float> p = *f.engine.Snapshot().params;
  EXPECT_FLOAT_EQ(p[0], 0.0f);  // the mean of a and b alone
  EXPECT_FLOAT_EQ(p[1], 1.0f);
  ASSERT_NE(u->landed, nullptr);
  for (uint64_t id : {e.worker_id, z.worker_id}) {
    ASSERT_EQ(u->landed->count(id), 1u);
    ASSERT_EQ(u->landed->at(id).size(), 1u);
    EXPECT_EQ(u->landed->at(id)[0].fraction, 0.0f);
    EXPECT_EQ(u->landed->at(id)[0].count, 4u);
  }
  EXPECT_EQ(u->landed->count(a.worker_id), 0u);  // counted in full: nothing to tell
  EXPECT_EQ(f.engine.Stats().screened.at("evil").rejected, 1u);
}

// The sum runs in participant order, not arrival order: the same pushes give the same bits.
TEST(RoundEngine, TheAggregateDoesNotDependOnArrivalOrder) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<std::vector<float>> deltas(5, std::vector<float>(64));
  for (auto& d : deltas)
    for (float& v : d) v = 1e-2f + g(rng) * 1e-3f;  // a common direction plus noise
  std::vector<uint64_t> checksums;
  for (std::vector<int> order : {std::vector<int>{0, 1, 2, 3, 4}, {4, 2, 0, 3, 1}, {3, 4, 1, 0, 2}}) {
    Fixture f(Fixture::Defaults(), 64);
    std::vector<RoundEngine::Joined> w;
    for (int i = 0; i < 5; ++i) w.push_back(f.engine.Join("w", "p" + std::to_string(i)));
    for (int i : order) ASSERT_TRUE(f.engine.Push(w[i].worker_id, 0, DensePayload(deltas[i])).ok());
    checksums.push_back(f.engine.Snapshot().checksum);
  }
  EXPECT_EQ(checksums[0], checksums[1]);
  EXPECT_EQ(checksums[0], checksums[2]);
}

// A participant that pushes in alternate rounds (and is silent in the others) is waited for
// only logarithmically often: an on-time push does not prove it before its backoff passed.
TEST(RoundEngine, AlternatingPushAndSilenceHoldsFewRoundsOpen) {
  Fixture f;
  auto a = f.engine.Join("a"), b = f.engine.Join("b"), s = f.engine.Join("alt");
  int waited = 0;
  for (uint64_t r = 0; r < 40; ++r) {
    ASSERT_TRUE(f.engine.Push(a.worker_id, r, DensePayload({1, 0, 0, 0})).ok());
    if (r % 2 == 0) {
      ASSERT_TRUE(f.engine.Push(s.worker_id, r, DensePayload({1, 0, 0, 0})).ok());
    }
    ASSERT_TRUE(f.engine.Push(b.worker_id, r, DensePayload({1, 0, 0, 0})).ok());
    if (f.engine.Stats().open_round == r) {  // waiting for s
      ++waited;
      f.clock.Advance(11);
      for (auto* w : {&a, &b, &s}) f.engine.Heartbeat(w->worker_id).IgnoreError();
      f.engine.Tick();
    }
    ASSERT_EQ(f.engine.Stats().open_round, r + 1);
  }
  EXPECT_LE(waited, 6);  // log2(40) + 1
  EXPECT_EQ(f.engine.Stats().straggler_waits, static_cast<uint64_t>(waited));
}

// At a cold start silent joiners are expected (nobody is proven yet), but the straggler
// clock starts at the first push: they hold round 0 for round_timeout_s, not the backstop.
TEST(RoundEngine, SilentJoinersAtAColdStartHoldOneTimeoutAtMost) {
  Fixture f;
  auto a = f.engine.Join("a");
  for (int i = 0; i < 3; ++i) f.engine.Join("sybil", "mallory" + std::to_string(i));
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
  f.clock.Advance(10.5);
  f.engine.Heartbeat(a.worker_id).IgnoreError();
  f.engine.Tick();
  EXPECT_EQ(f.engine.Stats().open_round, 1u);
}

// The join counter is part of the state: a resumed engine hands out new data orders.
TEST(RoundEngine, TheJoinCounterSurvivesARestart) {
  Fixture f;
  f.engine.Join("a");
  f.engine.Join("b");
  EngineState st = f.engine.ExportState();
  EXPECT_EQ(st.joins, 2u);
  FakeClock clock;
  RoundEngine resumed(Fixture::Defaults(), st, &clock);
  EXPECT_EQ(resumed.Join("c").join_index, 2u);
}

TEST(RoundEngine, PayloadsBeyondTheValueLimitAreRefused) {
  Fixture f;
  auto a = f.engine.Join("a");
  const float big = std::numeric_limits<float>::max();
  for (float v : {big, -big, 2 * kMaxAbsValue}) {
    EXPECT_EQ(f.engine.Push(a.worker_id, 0, DensePayload({v, 0, 0, 0})).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(f.engine.Stats().rejected_bad_payload, 3u);
  EXPECT_EQ(f.engine.Stats().open_round, 0u);
}

TEST(RoundEngine, PushInAnotherCodecThanTheRunsIsRefused) {
  EngineOptions o = Fixture::Defaults();
  o.uplink = PlanSegments({TensorShape{2, 4, false}}, *ParseCodec("quant:bits=2,chunk=8"));
  Fixture f(o, 4);
  auto a = f.engine.Join("a");
  EXPECT_EQ(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).code(), absl::StatusCode::kInvalidArgument);
  const float x[4] = {1, 0, 0, 0};
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, Encode(o.uplink, x)).ok());
}

TEST(RoundEngine, ADownlinkOutOfRangeDiscardsTheStepInsteadOfAborting) {
  EngineOptions o = Fixture::Defaults();
  o.outer = OuterSgdOptions{2.0f, 0.0f, false};  // 2 x 1e6 cannot be sent down
  o.screen.mode = Robust::kOff;
  Fixture f(o, 4);
  auto a = f.engine.Join("a");
  const uint64_t before = f.engine.Snapshot().checksum;
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({kMaxAbsValue, 0, 0, 0})).ok());
  EXPECT_EQ(f.engine.Stats().open_round, 1u);
  EXPECT_EQ(f.engine.Stats().downlink_resets, 1u);
  EXPECT_EQ(f.engine.Snapshot().checksum, before);
  EXPECT_EQ(f.engine.ExportState().theta_true, f.engine.ExportState().theta_pub);
  // The next round works normally.
  ASSERT_TRUE(f.engine.Push(a.worker_id, 1, DensePayload({0.5f, 0, 0, 0})).ok());
  EXPECT_FLOAT_EQ((*f.engine.Snapshot().params)[0], 0.0f);
}

TEST(RoundEngine, SignVotesOfZeroDirectionsDoNotDrift) {
  // SignMuon: a coordinate whose direction is exactly zero on every worker (an embedding row
  // of a byte absent from every batch) must not move in expectation. It once voted +1 on
  // every worker and moved by -lr each round.
  EngineOptions o = Fixture::Defaults();
  o.aggregation = Aggregation::kVote;
  const size_t n = 4096, rounds = 20;
  Fixture f(o, n);
  const std::vector<Segment> signs = PlanSegments({TensorShape{1, n, false}}, *ParseCodec("sign:chunk=4096"));
  std::vector<RoundEngine::Joined> workers;
  for (int k = 0; k < 3; ++k) workers.push_back(f.engine.Join("w"));
  for (uint64_t r = 0; r < rounds; ++r) {
    for (uint64_t k = 0; k < workers.size(); ++k) {
      std::vector<float> zeros(n, 0.0f);
      const std::string payload = Compress(signs, nullptr, 1.0f, zeros.data(), (k + 1) * 1000003 + r * 7919);
      ASSERT_TRUE(f.engine.Push(workers[k].worker_id, r, payload).ok());
    }
  }
  ASSERT_EQ(f.engine.Stats().open_round, rounds);
  double mean = 0;
  for (float v : *f.engine.Snapshot().params) mean += v - 1.0;
  mean /= n;
  // Each coordinate walks +-1 per round: sd sqrt(20) = 4.5 per coordinate, 0.07 for the mean
  // of 4096. The old bias was -20.
  EXPECT_NEAR(mean, 0.0, 0.35);
}

// Asynchronous mode: plain averaging (no screening) so the weights can be read off θ.
EngineOptions AsyncOptionsForTest() {
  EngineOptions o = Fixture::Defaults();
  o.async.enabled = true;
  o.async.grace_min_s = 0.05;
  o.async.grace_max_s = 1;
  o.async.max_staleness = 2;
  o.min_quorum = 2;
  o.screen.mode = Robust::kOff;
  o.async.partial_steps = false;  // whole steps: the weights read off θ directly (see the last test)
  return o;
}

// Two fast workers close rounds at the quorum and the grace window, without waiting for a
// third that has not pushed; its push from an older version lands in the open round with
// weight (1 + 1)^-0.5, and every replica follows the server's versions bit for bit.
TEST(RoundEngine, AsyncMergesTheQuorumAndLaterAStalePushWithoutWaiting) {
  Fixture f(AsyncOptionsForTest());
  auto a = f.engine.Join("a"), b = f.engine.Join("b"), slow = f.engine.Join("slow");
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 1, 1, 1})).ok());
  f.clock.Advance(0.01);
  ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({3, 3, 3, 3})).ok());
  f.engine.Tick();
  EXPECT_EQ(f.engine.OpenRound(), 0u);  // the grace window: 2 x 0.01 s, raised to grace_min_s
  f.clock.Advance(0.04);
  f.engine.Tick();
  EXPECT_EQ(f.engine.OpenRound(), 1u);  // closed without `slow`, and no straggler wait counted
  EXPECT_EQ(f.engine.Stats().straggler_waits, 0u);
  EXPECT_DOUBLE_EQ(f.engine.Stats().last_grace_s, 0.05);
  auto u0 = f.engine.AwaitRound(0, 0);
  ASSERT_TRUE(u0.ok());
  EXPECT_EQ(u0->contributors, 2u);
  for (float v : *f.engine.Snapshot().params) EXPECT_FLOAT_EQ(v, 1.0f - 2.0f);

  // Round 1: `slow` pushes from version 0 (one behind), a and b from version 1.
  ASSERT_TRUE(f.engine.Push(slow.worker_id, 0, DensePayload({6, 6, 6, 6})).ok());
  ASSERT_TRUE(f.engine.Push(a.worker_id, 1, DensePayload({1, 1, 1, 1})).ok());
  ASSERT_TRUE(f.engine.Push(b.worker_id, 1, DensePayload({1, 1, 1, 1})).ok());
  f.clock.Advance(1.0);
  f.engine.Tick();
  auto u1 = f.engine.AwaitRound(1, 0);
  ASSERT_TRUE(u1.ok());
  EXPECT_EQ(u1->contributors, 3u);
  const float w = static_cast<float>(1 / std::sqrt(2.0));
  const float mean = (1 + 1 + w * 6) / (2 + w);
  for (float v : *f.engine.Snapshot().params) EXPECT_NEAR(v, -1.0f - mean, 1e-6);
  const EngineStats st = f.engine.Stats();
  EXPECT_EQ(st.stale_pushes, 1u);
  EXPECT_EQ(st.staleness_sum, 1u);
  std::vector<float> replica = f.init;  // a worker that applies the versions in order
  for (const auto& u : {*u0, *u1}) ASSERT_TRUE(DecodeAccumulate(*u.payload, 4, replica.data()).ok());
  EXPECT_EQ(ParamChecksum(replica.data(), 4), u1->checksum);
}

// The quorum (2) counts only the sessions heard from within max(grace_max_s, heartbeat
// timeout / 2) (1 s here): with c dead and b gone silent, a's lone push waits only until b has
// been silent that long; once b is heard again the quorum is 2 again.
TEST(RoundEngine, AsyncQuorumShrinksToTheSessionsStillHeardFrom) {
  EngineOptions o = AsyncOptionsForTest();
  o.heartbeat_timeout_s = 2;
  Fixture f(o);
  auto a = f.engine.Join("a"), b = f.engine.Join("b");
  f.engine.Join("c");
  f.clock.Advance(0.5);
  ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 1, 1, 1})).ok());
  ASSERT_TRUE(f.engine.Heartbeat(b.worker_id).ok());
  f.clock.Advance(0.9);  // c silent 1.4 s, b 0.9 s: a quorum of 2, one push in
  ASSERT_TRUE(f.engine.Heartbeat(a.worker_id).ok());
  f.engine.Tick();
  EXPECT_EQ(f.engine.OpenRound(), 0u);
  f.clock.Advance(0.2);  // b silent 1.1 s: only a is heard from
  f.engine.Tick();
  ASSERT_EQ(f.engine.OpenRound(), 1u);
  auto u = f.engine.AwaitRound(0, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->contributors, 1u);
  ASSERT_TRUE(f.engine.Heartbeat(b.worker_id).ok());  // b is back
  ASSERT_TRUE(f.engine.Push(a.worker_id, 1, DensePayload({1, 1, 1, 1})).ok());
  f.clock.Advance(0.5);
  f.engine.Tick();
  EXPECT_EQ(f.engine.OpenRound(), 1u);
  ASSERT_TRUE(f.engine.Push(b.worker_id, 1, DensePayload({1, 1, 1, 1})).ok());
  f.clock.Advance(0.5);  // the grace window (the gaps' median 0.8 s x 2, at most 1 s)
  f.engine.Tick();
  EXPECT_EQ(f.engine.OpenRound(), 2u);
}

// A push from a version too old, or not yet published, is refused (fetch the model); a
// session pushes once per round and never twice from one version, also once the round closed.
TEST(RoundEngine, AsyncRefusesStaleFutureAndRepeatedVersions) {
  Fixture f(AsyncOptionsForTest());
  auto a = f.engine.Join("a"), b = f.engine.Join("b"), c = f.engine.Join("c");
  for (uint64_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(f.engine.Push(a.worker_id, r, DensePayload({1, 0, 0, 0})).ok());
    ASSERT_TRUE(f.engine.Push(b.worker_id, r, DensePayload({1, 0, 0, 0})).ok());
    f.clock.Advance(1.0);
    f.engine.Tick();
  }
  ASSERT_EQ(f.engine.OpenRound(), 3u);
  absl::Status old = f.engine.Push(c.worker_id, 0, DensePayload({1, 0, 0, 0}));
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(old.message().find("3 versions behind round 3 (at most 2)"), std::string::npos) << old;
  EXPECT_EQ(f.engine.Push(c.worker_id, 4, DensePayload({1, 0, 0, 0})).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(f.engine.Push(c.worker_id, 1, DensePayload({1, 0, 0, 0})).ok());  // 2 behind: taken
  EXPECT_EQ(f.engine.Push(c.worker_id, 3, DensePayload({1, 0, 0, 0})).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(f.engine.Push(a.worker_id, 3, DensePayload({1, 0, 0, 0})).ok());
  f.clock.Advance(1.0);
  f.engine.Tick();
  ASSERT_EQ(f.engine.OpenRound(), 4u);
  // c's reply was lost: its retry from version 1 is a duplicate, not a new update.
  EXPECT_EQ(f.engine.Push(c.worker_id, 1, DensePayload({1, 0, 0, 0})).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(f.engine.Push(c.worker_id, 2, DensePayload({1, 0, 0, 0})).code(), absl::StatusCode::kOk);
}

// The grace window follows the arrival rate: grace_factor x the median gap between the latest
// pushes, within [grace_min_s, grace_max_s].
TEST(RoundEngine, AsyncGraceFollowsTheArrivalRate) {
  EngineOptions o = AsyncOptionsForTest();
  o.async.grace_max_s = 5;
  o.min_quorum = 1;
  {
    Fixture f(o);
    auto a = f.engine.Join("a"), b = f.engine.Join("b"), c = f.engine.Join("c");
    ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
    f.clock.Advance(0.4);
    ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());  // one gap: grace 0.8 s
    f.clock.Advance(0.39);
    f.engine.Tick();
    EXPECT_EQ(f.engine.OpenRound(), 0u);
    f.clock.Advance(0.01);
    ASSERT_TRUE(f.engine.Push(c.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());  // 0.8 s after the first
    EXPECT_EQ(f.engine.OpenRound(), 1u);
    EXPECT_NEAR(f.engine.Stats().last_grace_s, 0.8, 1e-9);
    auto u = f.engine.AwaitRound(0, 0);
    ASSERT_TRUE(u.ok());
    EXPECT_EQ(u->contributors, 3u);
  }
  {
    Fixture f(o);  // pushes 10 s apart: the window stops at grace_max_s
    auto a = f.engine.Join("a"), b = f.engine.Join("b");
    ASSERT_TRUE(f.engine.Push(a.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
    f.clock.Advance(10);
    ASSERT_TRUE(f.engine.Push(b.worker_id, 0, DensePayload({1, 0, 0, 0})).ok());
    EXPECT_EQ(f.engine.OpenRound(), 1u);
    EXPECT_DOUBLE_EQ(f.engine.Stats().last_grace_s, 5);
  }
}

// partial_steps: a round that merged two of the four sessions that push takes half an outer
// step; one that merged all four, a whole one; a session that joined and never pushed (a
// sybil, a worker still starting) does not count.
TEST(RoundEngine, AsyncScalesAStepByTheShareOfARoundItMerged) {
  EngineOptions o = AsyncOptionsForTest();
  o.async.partial_steps = true;
  Fixture f(o);
  std::vector<RoundEngine::Joined> w;
  for (const char* name : {"a", "b", "c", "d", "idle"}) w.push_back(f.engine.Join(name));
  for (size_t i = 0; i < 4; ++i) ASSERT_TRUE(f.engine.Push(w[i].worker_id, 0, DensePayload({1, 1, 1, 1})).ok());
  f.clock.Advance(1.0);
  f.engine.Tick();
  ASSERT_EQ(f.engine.OpenRound(), 1u);
  for (float v : *f.engine.Snapshot().params) EXPECT_FLOAT_EQ(v, 1.0f - 1.0f);
  ASSERT_TRUE(f.engine.Push(w[0].worker_id, 1, DensePayload({1, 1, 1, 1})).ok());
  ASSERT_TRUE(f.engine.Push(w[1].worker_id, 1, DensePayload({3, 3, 3, 3})).ok());
  f.clock.Advance(1.0);
  f.engine.Tick();
  ASSERT_EQ(f.engine.OpenRound(), 2u);
  for (float v : *f.engine.Snapshot().params) EXPECT_FLOAT_EQ(v, 0.0f - 0.5f * 2.0f);
}

// A push that screening leaves out is not merged work: a round of three pushes, one of them
// opposed to the others, steps by 2 / 4 of their mean (it stepped by 3 / 4 on two pushes).
TEST(RoundEngine, AsyncShareCountsOnlyThePushesScreeningLeftIn) {
  EngineOptions o = AsyncOptionsForTest();
  o.async.partial_steps = true;
  o.screen = Fixture::Defaults().screen;
  o.inner_steps = 10;
  Fixture f(o, 4);
  std::vector<RoundEngine::Joined> w;
  for (const char* name : {"a", "b", "c", "evil"}) w.push_back(f.engine.Join(name));
  for (size_t i = 0; i < 4; ++i) ASSERT_TRUE(f.engine.Push(w[i].worker_id, 0, DensePayload({0, 0, 0, 1})).ok());
  f.clock.Advance(1.0);
  f.engine.Tick();
  ASSERT_EQ(f.engine.OpenRound(), 1u);  // all four pushed: each is active
  const std::vector<float> before = *f.engine.Snapshot().params;
  ASSERT_TRUE(f.engine.Push(w[0].worker_id, 1, DensePayload({1, 0.2f, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(w[1].worker_id, 1, DensePayload({1, -0.2f, 0, 0})).ok());
  ASSERT_TRUE(f.engine.Push(w[3].worker_id, 1, DensePayload({-1.2f, 0, 0, 0}), 7).ok());
  f.clock.Advance(1.0);
  f.engine.Tick();
  ASSERT_EQ(f.engine.OpenRound(), 2u);
  EXPECT_EQ(f.engine.Stats().screened.at("evil").rejected, 1u);
  // Merged: round 0's four whole pushes and round 1's two; evil's 7 steps were accepted, not merged.
  EXPECT_EQ(f.engine.Stats().inner_steps_accepted, 6 * 10u + 7);
  EXPECT_EQ(f.engine.Stats().inner_steps_merged, 6 * 10u);
  const std::vector<float> p = *f.engine.Snapshot().params;
  EXPECT_FLOAT_EQ(p[0], before[0] - 0.5f * 1.0f);  // the mean of a and b, by 2 pushes of 4
  EXPECT_FLOAT_EQ(p[1], before[1]);
}

}  // namespace
}  // namespace muloco
