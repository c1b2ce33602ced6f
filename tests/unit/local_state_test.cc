// A worker's saved local training (--state_file): a trainer restored from another's saved
// state continues bit for bit as the original does (parameters, AdamW and Muon state), its
// saved base makes Rebase move exactly the saved progress, and bad files or another model's
// state are refused with INVALID_ARGUMENT (NOT_FOUND for no file).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/model_layout.h"
#include "common/run_config.h"
#include "worker/data.h"
#include "worker/local_state.h"
#include "worker/trainer.h"

namespace muloco {
namespace {

v1::RunConfig SmallRun(uint32_t d_model) {
  v1::RunConfig c = *PresetConfig("muloco");  // Muon for the hidden matrices, AdamW for the rest
  v1::ModelSpec* m = c.mutable_model();
  m->set_n_layer(1);
  m->set_n_head(2);
  m->set_d_model(d_model);
  m->set_context(8);
  m->set_vocab_size(32);
  c.set_batch_size(2);
  c.set_eval_batches(0);
  return c;
}

// A trainer on the run's initial model (a Trainer's own parameters are zeros until set).
std::unique_ptr<Trainer> Initialised(const v1::RunConfig& c, const Corpus& corpus, uint64_t seed) {
  auto t = std::make_unique<Trainer>(c, &corpus, seed);
  const std::vector<float> init = InitParams(c.model(), BuiltinLayout(c.model()));
  t->SetParams(init.data());
  return t;
}

Corpus RandomCorpus() {
  Corpus corpus;
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) corpus.train.push_back(rng() % 32);
  corpus.val = corpus.train;
  return corpus;
}

std::vector<float> Params(const Trainer& t) {
  std::vector<float> p(t.num_params());
  t.GetParams(p.data());
  return p;
}

std::string TempPath(const std::string& name) {
  return std::string(::testing::TempDir()) + "/muloco_state_" + name + "_" + std::to_string(getpid());
}

TEST(LocalState, ARestoredTrainerContinuesBitForBit) {
  const v1::RunConfig c = SmallRun(16);
  const Corpus corpus = RandomCorpus();
  const std::unique_ptr<Trainer> owner = Initialised(c, corpus, 1);
  Trainer& a = *owner;
  const std::vector<float> base = Params(a);
  a.TrainSteps(0, 30);  // AdamW moments and Muon momentum are far from a fresh trainer's now
  const std::string saved = a.SaveState(base.data());

  Trainer b(c, &corpus, 2);  // fresh: other parameters, empty optimizer state
  ASSERT_TRUE(b.RestoreState(saved).ok());
  Trainer params_only(c, &corpus, 2);  // the parameters without the optimizers' state
  const std::vector<float> theta = Params(a);
  params_only.SetParams(theta.data());
  EXPECT_EQ(Params(b), Params(a));
  b.Rebase(base.data());  // the saved base is the restored one: no move
  EXPECT_EQ(Params(b), Params(a));

  std::mt19937 rng(3);
  for (uint64_t step = 30; step < 33; ++step) {
    std::vector<int64_t> batch(c.batch_size() * (c.model().context() + 1));
    for (int64_t& t : batch) t = rng() % 32;
    EXPECT_EQ(a.InnerStepOn(batch, step), b.InnerStepOn(batch, step)) << "step " << step;
    params_only.InnerStepOn(batch, step);
  }
  EXPECT_EQ(Params(b), Params(a));  // the optimizers' state came along: the same updates
  EXPECT_NE(Params(params_only), Params(a));  // which the parameters alone do not give

  // Rebase onto another public model moves the progress (θ − base) onto it.
  Trainer d(c, &corpus, 3);
  ASSERT_TRUE(d.RestoreState(saved).ok());
  std::vector<float> pub = base;
  for (float& x : pub) x += 0.25f;
  const std::vector<float> before = Params(d);
  d.Rebase(pub.data());
  const std::vector<float> after = Params(d);
  for (size_t i = 0; i < after.size(); ++i) ASSERT_FLOAT_EQ(after[i], before[i] + (pub[i] - base[i])) << i;
}

TEST(LocalState, AnotherModelsStateOrGarbageIsRefused) {
  const Corpus corpus = RandomCorpus();
  Trainer small(SmallRun(16), &corpus, 1);
  const std::vector<float> base = Params(small);
  Trainer wide(SmallRun(32), &corpus, 1);
  const absl::Status other = wide.RestoreState(small.SaveState(base.data()));
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument) << other;
  const absl::Status garbage = wide.RestoreState("not a state");
  EXPECT_EQ(garbage.code(), absl::StatusCode::kInvalidArgument) << garbage;
}

TEST(LocalState, FileRoundTripAndBadHeaders) {
  const std::string path = TempPath("file");
  LocalState s{0xfedcba9876543210ULL, 42, true, 17, std::string("bytes\n\0with a nul", 17)};
  ASSERT_TRUE(WriteLocalState(path, s).ok());
  absl::StatusOr<LocalState> read = ReadLocalState(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->run, s.run);
  EXPECT_EQ(read->base_round, 42u);
  EXPECT_TRUE(read->in_flight);
  EXPECT_EQ(read->steps, 17u);
  EXPECT_EQ(read->trainer, s.trainer);

  for (const std::string bad : {"", "muloco-worker-state 2 00 1 0 3\nx", "muloco-worker-state 1 00 1 2 3\nx",
                                "muloco-worker-state 1 00 1 0\nx", "muloco-worker-state 1 00 1 0 3 junk\nx",
                                "something else entirely"}) {
    std::ofstream(path, std::ios::binary) << bad;
    EXPECT_EQ(ReadLocalState(path).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  std::remove(path.c_str());
  EXPECT_EQ(ReadLocalState(path).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace muloco
