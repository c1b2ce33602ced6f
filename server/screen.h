// Robust aggregation of a round's pseudo-gradients (kMean runs): what one hostile or broken
// participant, or a minority of colluding ones, can do to the mean is bounded four ways.
//
// 1. Per tensor, a norm bound against that tensor's honest scale: an update above
//    chunk_factor x the scale has that tensor clipped to it, so no update can pour its
//    budget into a few coordinates (a gain vector, one matrix). The scale is the median
//    of this round's norms of that tensor over proven participants when there are at least
//    min_samples of them, never more than `growth` x last round's (so a majority cannot
//    ratchet it up); with fewer, growth x last round's scale (the history: honest norms may
//    grow that much in a round, e.g. in a warmup); with no history either (a run's first
//    round), pair_factor x the smallest norm of the round. The history is the lower median
//    of the clipped norms of updates that counted at least half, so one of two participants
//    cannot raise it (or sink it with a tiny push).
// 2. A direction check: each clipped update's cosine to a reference the attackers cannot
//    steer: the coordinate-wise median of the round's clipped updates when there are at
//    least min_samples participants, else the last round's aggregate (or a decaying sum of
//    the last rounds' aggregates: ScreenOptions::trend). An update opposed to
//    it (cosine <= 0; < 0 against last round's aggregate, to which honest updates agree only
//    weakly) is left out; against the median, one that agrees less than `agree` x the typical
//    honest cosine gets a proportionally smaller weight, so updates that carry no signal
//    (noise, replays) do not dilute the mean. A lone participant is not weighed.
// 3. A staleness check: each update's cosine c to last round's aggregate against the median
//    t of those that passed the direction check at least half (when there are min_samples).
//    One that leans on it further (a replay or amplification of the last step: momentum, no
//    news, and the direction check cannot tell it from an honest update) weighs by its fresh
//    part's share (1 - c^2) / (1 - t^2): barely less just above t, nothing as c reaches 1.
// 4. A size check: an update far smaller than the honest norm (zeros, tiny pushes) gets a
//    weight proportional to its norm (0 for zeros), so it does not dilute the mean either;
//    one of fewer inner steps (Contribution::steps_share) is expected to be that much smaller.
// The aggregate is Σ w_i·clip(Δ_i) / Σ w_i over participants in the given order (so a run
// is bit-reproducible), or a coordinate-wise trimmed mean (kTrimmed). Each participant
// learns what share of each tensor counted (its error feedback keeps the rest).
// Work goes tensor by tensor on `threads` threads, holding one tensor of every update.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace muloco {

enum class Robust {
  kOff,      // every validated update weighs its token's weight, unclipped
  kClip,     // the three bounds above (the default)
  kReject,   // as kClip, but an update over any tensor's bound is left out whole
  kTrimmed,  // tensors clipped as kClip, then a coordinate-wise trimmed mean (no weights)
};

struct ScreenOptions {
  Robust mode = Robust::kClip;
  double chunk_factor = 1.0;  // a tensor's norm above chunk_factor x its honest scale is clipped to that
                              // (1: to the median; an update in the honest direction cannot enlarge the step)
  double pair_factor = 4.0;   // no statistics and no history (a first round): bound = pair_factor x the smallest
  double growth = 2.0;        // a scale from this round's median is at most growth x last round's
  size_t min_samples = 3;     // participants needed for this round's own statistics (else the history)
  double agree = 0.5;         // full weight at a cosine >= agree x the typical one; none at <= 0
  double tiny = 0.5;          // full weight at a norm >= tiny x the typical one; proportionally less below
  double trim = 0.2;          // kTrimmed: share of values dropped at each end of every coordinate
                              // (at least one each end with three or more participants)
  // With fewer than min_samples participants the direction check's reference is the history:
  // last round's aggregate (0), or with trend in (0, 1) the aggregates of past rounds, each
  // weighing `trend` x the next newer one. Rounds of one or two pushes (async mode's) agree
  // with a single last round's aggregate so weakly that an honest update often points a
  // little against it; their sum over a few rounds holds more of the common direction.
  double trend = 0;
};

// A contiguous range of the flat parameter buffer screened as one tensor.
struct ScreenChunk {
  uint64_t offset = 0, numel = 0;
};

// One participant's update in a round: the mean of its sessions' payloads.
struct Contribution {
  std::string name;                         // for logs
  float weight = 1;                         // its token's weight
  bool proven = false;                      // its statistics count (see the top)
  double steps_share = 1;                   // its inner steps / the run's H: the size check expects that share
  std::vector<absl::string_view> payloads;  // validated (DecodedNorm), one per session
};

// What the screening made of one contribution.
struct Verdict {
  double norm = 0;          // of the update after clipping
  double cosine = 0;        // to the reference (0 when there was none)
  bool has_reference = false;
  bool has_last = false;
  double last_cosine = 0;   // to last round's aggregate (0 when there was none)
  double weight = 0;        // its share in the mean: 0 (left out) .. its token's weight
  uint32_t clipped = 0;     // tensors clipped
  std::vector<float> landed;  // per chunk, the fraction of the update that counted
  const char* reason = "";  // why its weight fell: "", "empty", "opposed", "weak", "stale", "small", "over the bound"
};

class RobustAggregator {
 public:
  // `chunks` tile [0, n) in order. `threads` >= 1.
  RobustAggregator(ScreenOptions options, std::vector<ScreenChunk> chunks, size_t n, int threads);

  // out[0, n) = the aggregate of `in` (0 when nothing counts); one verdict per contribution.
  // Remembers the round's statistics and aggregate for the next rounds.
  std::vector<Verdict> Aggregate(const std::vector<Contribution>& in, float* out);

  Robust mode() const { return options_.mode; }
  const std::vector<ScreenChunk>& chunks() const { return chunks_; }

 private:
  struct RoundStats;
  void Measure(const std::vector<Contribution>& in, RoundStats* st);
  // The clip bound of chunk c's norms this round (infinite: no clipping); reads st.raw.
  double ChunkBound(const std::vector<Contribution>& in, const RoundStats& st, size_t c) const;
  // Each verdict's norm, cosines and clip count from pass one; true for the participants
  // whose statistics count (not empty; proven, or nobody is).
  std::vector<bool> Describe(const std::vector<Contribution>& in, const RoundStats& st,
                             std::vector<Verdict>* verdicts) const;
  void Weigh(const std::vector<Contribution>& in, RoundStats* st, std::vector<Verdict>* verdicts) const;
  void Sum(const std::vector<Contribution>& in, const RoundStats& st, const std::vector<Verdict>& verdicts,
           float* out) const;
  void Remember(const std::vector<Contribution>& in, const RoundStats& st, const std::vector<Verdict>& verdicts,
                const float* out);

  const ScreenOptions options_;
  const std::vector<ScreenChunk> chunks_;
  const size_t n_;
  const int threads_;
  const std::vector<uint64_t> offsets_;  // ParallelUnits' units: each chunk's first element, then n
  // The history: last round's honest scales (< 0: none yet), typical cosine and aggregate.
  std::vector<double> chunk_scale_;
  double norm_scale_ = -1, cosine_scale_ = -1;
  std::vector<float> last_aggregate_;  // empty: none yet
  std::vector<float> trend_;           // options_.trend > 0: the past aggregates' decaying sum (empty: none yet)
};

// Each chunk's first element (they tile [0, n) in order), then n.
std::vector<uint64_t> ChunkOffsets(const std::vector<ScreenChunk>& chunks);

// Chunks for a layout's tensors: one per tensor (`sizes` in order).
std::vector<ScreenChunk> ChunksOf(const std::vector<uint64_t>& sizes);

// "off" | "clip" | "reject" | "trimmed"; false for anything else.
bool ParseRobust(const std::string& text, Robust* out);

}  // namespace muloco
