// RobustAggregator (see screen.h): two passes over the tensors, each decoding one tensor of
// every update at a time. The first measures (norms, clip factors, the reference and each
// update's dot product with it), the weights are set from the sums, and the second adds
// the clipped, weighted updates in participant order.
#include "server/screen.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "codec/codec.h"
#include "codec/parallel.h"
#include "common/median.h"

namespace muloco {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// x[0, len) = the mean of the payloads' elements [offset, offset + len).
void DecodeMean(const std::vector<PayloadSegments>& payloads, uint64_t offset, uint64_t len, float* x) {
  std::fill(x, x + len, 0.0f);
  for (const PayloadSegments& p : payloads) p.DecodeRange(offset, len, x);
  if (payloads.size() > 1) {
    const float inv = 1.0f / static_cast<float>(payloads.size());
    for (uint64_t j = 0; j < len; ++j) x[j] *= inv;
  }
}

double SquaredNorm(const float* x, uint64_t len) {
  double s = 0;
  for (uint64_t j = 0; j < len; ++j) s += static_cast<double>(x[j]) * x[j];
  return s;
}

double Dot(const float* x, const float* y, uint64_t len) {
  double s = 0;
  for (uint64_t j = 0; j < len; ++j) s += static_cast<double>(x[j]) * y[j];
  return s;
}

// The staleness check's t: the median cosine to last round's aggregate of the updates whose
// statistics count and that passed the direction check at least half; 2 (no check) with fewer
// than `enough`. An update that leans on that aggregate further than t (a replay of the last
// step adds momentum, no news) weighs by its fresh part's share, (1 - c^2) / (1 - t^2): barely
// less just above t, nothing as c reaches 1.
double TypicalLastCosine(const std::vector<bool>& sample, const std::vector<double>& shares,
                         const std::vector<Verdict>& verdicts, size_t enough) {
  std::vector<double> v;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    if (sample[i] && shares[i] >= 0.5 && verdicts[i].has_last) v.push_back(verdicts[i].last_cosine);
  }
  return v.size() >= enough ? std::max(0.0, Median(v)) : 2;
}

}  // namespace

// Pass one's results: [i * chunks + c] for participant i and chunk c.
struct RobustAggregator::RoundStats {
  size_t participants = 0;
  bool any_proven = false;  // no one proven: a cold start, every participant's statistics count
  std::vector<std::vector<PayloadSegments>> payloads;
  std::vector<double> raw;    // norm of the update's tensor before clipping
  std::vector<float> factor;  // clip factor (1: unclipped)
  std::vector<double> dot, sq;  // with the reference, and the squared norm, after clipping
  std::vector<double> ref_sq;   // per chunk: the reference's squared norm
  std::vector<double> dot_last;  // with last round's aggregate, after clipping (empty: none)
  std::vector<double> last_sq;   // per chunk: last round's aggregate's squared norm
  bool median_reference = false;
  std::vector<float> reference;  // the coordinate-wise median (median_reference only)
};

RobustAggregator::RobustAggregator(ScreenOptions options, std::vector<ScreenChunk> chunks, size_t n, int threads)
    : options_(options),
      chunks_(std::move(chunks)),
      n_(n),
      threads_(std::max(1, threads)),
      offsets_(ChunkOffsets(chunks_)),
      chunk_scale_(chunks_.size(), -1.0) {}

std::vector<Verdict> RobustAggregator::Aggregate(const std::vector<Contribution>& in, float* out) {
  RoundStats st;
  st.participants = in.size();
  for (const Contribution& c : in) {
    st.any_proven = st.any_proven || c.proven;
    st.payloads.emplace_back();
    for (absl::string_view p : c.payloads) {
      absl::StatusOr<PayloadSegments> seg = PayloadSegments::Of(p, n_);
      if (seg.ok()) st.payloads.back().push_back(*std::move(seg));  // validated at Push: always
    }
  }
  std::vector<Verdict> verdicts(in.size());
  std::fill(out, out + n_, 0.0f);
  if (in.empty()) return verdicts;
  Measure(in, &st);
  Weigh(in, &st, &verdicts);
  Sum(in, st, verdicts, out);
  Remember(in, st, verdicts, out);
  return verdicts;
}

double RobustAggregator::ChunkBound(const std::vector<Contribution>& in, const RoundStats& st, size_t c) const {
  // This round's proven norms (all of them while nobody is proven and there is no history),
  // else the history, else the pair rule.
  if (options_.mode == Robust::kOff) return kInf;
  const size_t P = in.size(), C = chunks_.size();
  std::vector<double> samples, nonzero;
  for (size_t i = 0; i < P; ++i) {
    const double v = st.raw[i * C + c];
    if (v <= 0) continue;
    nonzero.push_back(v);
    if (in[i].proven || (!st.any_proven && chunk_scale_[c] < 0)) samples.push_back(v);
  }
  if (samples.size() >= std::max<size_t>(1, options_.min_samples)) {
    double scale = Median(samples);
    if (chunk_scale_[c] > 0) scale = std::min(scale, options_.growth * chunk_scale_[c]);
    return options_.chunk_factor * scale;
  }
  if (chunk_scale_[c] > 0) return options_.chunk_factor * options_.growth * chunk_scale_[c];  // at its growth limit
  if (nonzero.size() >= 2) return options_.pair_factor * *std::min_element(nonzero.begin(), nonzero.end());
  return kInf;
}

void RobustAggregator::Measure(const std::vector<Contribution>& in, RoundStats* st) {
  const size_t P = in.size(), C = chunks_.size();
  const bool off = options_.mode == Robust::kOff;
  st->raw.assign(P * C, 0.0);
  st->factor.assign(P * C, 1.0f);
  st->dot.assign(P * C, 0.0);
  st->sq.assign(P * C, 0.0);
  st->ref_sq.assign(C, 0.0);
  const bool has_last = !off && !last_aggregate_.empty();
  if (has_last) st->dot_last.assign(P * C, 0.0), st->last_sq.assign(C, 0.0);
  st->median_reference = !off && P >= std::max<size_t>(1, options_.min_samples);
  if (st->median_reference) st->reference.assign(n_, 0.0f);
  ParallelUnits(offsets_, threads_, [&](size_t first, size_t last) {
    std::vector<float> x, column(P);
    for (size_t c = first; c < last; ++c) {
      const ScreenChunk& ch = chunks_[c];
      x.assign(P * ch.numel, 0.0f);
      for (size_t i = 0; i < P; ++i) {
        DecodeMean(st->payloads[i], ch.offset, ch.numel, x.data() + i * ch.numel);
        st->raw[i * C + c] = std::sqrt(SquaredNorm(x.data() + i * ch.numel, ch.numel));
      }
      const double bound = ChunkBound(in, *st, c);
      for (size_t i = 0; i < P; ++i) {
        const double v = st->raw[i * C + c];
        if (!(v > bound)) continue;
        const float f = static_cast<float>(bound / v);
        st->factor[i * C + c] = f;
        for (uint64_t j = 0; j < ch.numel; ++j) x[i * ch.numel + j] *= f;
      }
      // The reference for the direction check.
      const float* ref = nullptr;
      if (st->median_reference) {
        float* r = st->reference.data() + ch.offset;
        for (uint64_t j = 0; j < ch.numel; ++j) {
          for (size_t i = 0; i < P; ++i) column[i] = x[i * ch.numel + j];
          r[j] = MedianInPlace(&column);
        }
        ref = r;
      } else if (const std::vector<float>& past = options_.trend > 0 ? trend_ : last_aggregate_; !off && !past.empty()) {
        ref = past.data() + ch.offset;
      }
      if (ref != nullptr) st->ref_sq[c] = SquaredNorm(ref, ch.numel);
      const float* last_ref = has_last ? last_aggregate_.data() + ch.offset : nullptr;
      if (has_last) st->last_sq[c] = SquaredNorm(last_ref, ch.numel);
      for (size_t i = 0; i < P; ++i) {
        const float* xi = x.data() + i * ch.numel;
        st->sq[i * C + c] = SquaredNorm(xi, ch.numel);
        if (ref != nullptr) st->dot[i * C + c] = Dot(xi, ref, ch.numel);
        if (has_last) st->dot_last[i * C + c] = Dot(xi, last_ref, ch.numel);
      }
    }
  });
}

std::vector<bool> RobustAggregator::Describe(const std::vector<Contribution>& in, const RoundStats& st,
                                             std::vector<Verdict>* verdicts) const {
  const size_t P = in.size(), C = chunks_.size();
  double ref_sq = 0, last_sq = 0;
  for (double v : st.ref_sq) ref_sq += v;
  for (double v : st.last_sq) last_sq += v;
  std::vector<bool> sample(P);
  for (size_t i = 0; i < P; ++i) {
    Verdict& v = (*verdicts)[i];
    double sq = 0, dot = 0, dot_last = 0;
    for (size_t c = 0; c < C; ++c) {
      sq += st.sq[i * C + c];
      dot += st.dot[i * C + c];
      if (last_sq > 0) dot_last += st.dot_last[i * C + c];
      v.clipped += st.factor[i * C + c] < 1.0f;
    }
    v.norm = std::sqrt(sq);
    v.has_reference = ref_sq > 0 && v.norm > 0;
    v.cosine = v.has_reference ? dot / (v.norm * std::sqrt(ref_sq)) : 0;
    v.has_last = last_sq > 0 && v.norm > 0;
    v.last_cosine = v.has_last ? dot_last / (v.norm * std::sqrt(last_sq)) : 0;
    sample[i] = v.norm > 0 && (in[i].proven || !st.any_proven);
  }
  return sample;
}

void RobustAggregator::Weigh(const std::vector<Contribution>& in, RoundStats* st,
                             std::vector<Verdict>* verdicts) const {
  const size_t P = in.size(), C = chunks_.size();
  const std::vector<bool> sample = Describe(in, *st, verdicts);
  std::vector<double> cos_samples, norm_samples;
  for (size_t i = 0; i < P; ++i) {
    if (!sample[i]) continue;
    norm_samples.push_back((*verdicts)[i].norm);
    if ((*verdicts)[i].has_reference) cos_samples.push_back((*verdicts)[i].cosine);
  }
  const size_t enough = std::max<size_t>(1, options_.min_samples);
  const double typical_cos = cos_samples.size() >= enough ? Median(cos_samples) : cosine_scale_;
  const double typical_norm = norm_samples.size() >= enough ? Median(norm_samples) : norm_scale_;
  // Each share of its token's weight, from the direction check first.
  const bool compare = options_.mode != Robust::kOff && options_.mode != Robust::kTrimmed && P >= 2;
  std::vector<double> shares(P, 1.0);
  for (size_t i = 0; i < P; ++i) {
    Verdict& v = (*verdicts)[i];
    double& share = shares[i];
    if (options_.mode == Robust::kOff) continue;
    if (v.norm == 0) {
      share = 0, v.reason = "empty";
    } else if (options_.mode == Robust::kReject && v.clipped > 0) {
      share = 0, v.reason = "over the bound";
    } else if (compare) {  // alone, there is nothing to compare with
      // Against the round's median an honest update agrees clearly (cosine well above 0); against
      // last round's aggregate (fewer participants) agreement is weak even when honest, so
      // only an update pointing against it is left out.
      if (v.has_reference && (st->median_reference ? v.cosine <= 0 : v.cosine < 0)) {
        share = 0, v.reason = "opposed";
      } else if (st->median_reference && v.has_reference && typical_cos > 0 &&
                 v.cosine < options_.agree * typical_cos) {
        share = v.cosine / (options_.agree * typical_cos), v.reason = "weak";
      }
    }
  }
  const double typical_last = TypicalLastCosine(sample, shares, *verdicts, enough);
  for (size_t i = 0; i < P; ++i) {
    Verdict& v = (*verdicts)[i];
    double& share = shares[i];
    if (compare && share > 0) {
      if (v.last_cosine > typical_last) {  // the staleness check (see TypicalLastCosine)
        share *= std::max(0.0, 1 - v.last_cosine * v.last_cosine) / (1 - typical_last * typical_last);
        v.reason = "stale";
      }
      // A push of fewer inner steps is expected to be that much smaller.
      const double small = options_.tiny * typical_norm * std::clamp(in[i].steps_share, 0.0, 1.0);
      if (small > 0 && v.norm < small) {
        share *= v.norm / small;
        v.reason = "small";
      }
    }
    v.weight = share * in[i].weight;
    v.landed.resize(C);
    for (size_t c = 0; c < C; ++c) v.landed[c] = static_cast<float>(share) * st->factor[i * C + c];
  }
}

void RobustAggregator::Sum(const std::vector<Contribution>& in, const RoundStats& st,
                           const std::vector<Verdict>& verdicts, float* out) const {
  const size_t P = in.size(), C = chunks_.size();
  double total = 0;
  std::vector<size_t> counted;
  for (size_t i = 0; i < P; ++i) {
    if (verdicts[i].weight > 0) counted.push_back(i), total += verdicts[i].weight;
  }
  if (counted.empty()) return;  // out stays 0
  const bool trimmed = options_.mode == Robust::kTrimmed;
  const size_t m = counted.size();
  const size_t cut = trimmed ? std::max<size_t>(m >= 3 ? 1 : 0, static_cast<size_t>(options_.trim * m)) : 0;
  const size_t drop = std::min(cut, (m - 1) / 2);  // keep at least one value
  const float inv = static_cast<float>(1.0 / total);
  ParallelUnits(offsets_, threads_, [&](size_t first, size_t last) {
    std::vector<float> x, column(m);
    for (size_t c = first; c < last; ++c) {
      const ScreenChunk& ch = chunks_[c];
      x.assign(m * ch.numel, 0.0f);
      for (size_t k = 0; k < m; ++k) {
        const size_t i = counted[k];
        float* xi = x.data() + k * ch.numel;
        DecodeMean(st.payloads[i], ch.offset, ch.numel, xi);
        const float f = st.factor[i * C + c];
        if (f != 1.0f) {
          for (uint64_t j = 0; j < ch.numel; ++j) xi[j] *= f;
        }
      }
      float* o = out + ch.offset;
      if (trimmed) {
        for (uint64_t j = 0; j < ch.numel; ++j) {
          for (size_t k = 0; k < m; ++k) column[k] = x[k * ch.numel + j];
          std::sort(column.begin(), column.end());
          float s = 0;
          for (size_t k = drop; k < m - drop; ++k) s += column[k];
          o[j] = s / static_cast<float>(m - 2 * drop);
        }
        continue;
      }
      for (size_t k = 0; k < m; ++k) {
        const float w = static_cast<float>(verdicts[counted[k]].weight);
        const float* xi = x.data() + k * ch.numel;
        if (w == 1.0f) {
          for (uint64_t j = 0; j < ch.numel; ++j) o[j] += xi[j];
        } else {
          for (uint64_t j = 0; j < ch.numel; ++j) o[j] += w * xi[j];
        }
      }
      for (uint64_t j = 0; j < ch.numel; ++j) o[j] *= inv;
    }
  });
}

void RobustAggregator::Remember(const std::vector<Contribution>& in, const RoundStats& st,
                                const std::vector<Verdict>& verdicts, const float* out) {
  if (options_.mode == Robust::kOff) return;
  const size_t P = verdicts.size(), C = chunks_.size();
  // The history is made of updates that counted at least half (not a tiny push's), by lower
  // medians, and grows at most `growth` x a round: neither a large nor a tiny update of one
  // of two participants moves it, and a majority raises it only that fast.
  std::vector<bool> counted(P);
  std::vector<double> norms, cosines;
  for (size_t i = 0; i < P; ++i) {
    counted[i] = verdicts[i].weight > 0 && verdicts[i].weight >= 0.5 * in[i].weight;
    if (!counted[i]) continue;
    norms.push_back(verdicts[i].norm);
    if (verdicts[i].has_reference) cosines.push_back(verdicts[i].cosine);
  }
  if (norms.empty()) return;  // nothing counted: the history stands
  for (size_t c = 0; c < C; ++c) {
    std::vector<double> v;
    for (size_t i = 0; i < P; ++i) {
      const double clipped = st.raw[i * C + c] * st.factor[i * C + c];
      if (counted[i] && clipped > 0) v.push_back(clipped);
    }
    if (v.empty()) continue;
    const double scale = LowerMedian(std::move(v));
    chunk_scale_[c] = chunk_scale_[c] > 0 ? std::min(scale, options_.growth * chunk_scale_[c]) : scale;
  }
  norm_scale_ = LowerMedian(norms);
  if (!cosines.empty()) cosine_scale_ = Median(cosines);
  last_aggregate_.assign(out, out + n_);
  if (options_.trend > 0) {
    const float decay = trend_.empty() ? 0.0f : static_cast<float>(options_.trend);
    trend_.resize(n_, 0.0f);
    for (size_t j = 0; j < n_; ++j) trend_[j] = decay * trend_[j] + out[j];
  }
}

std::vector<uint64_t> ChunkOffsets(const std::vector<ScreenChunk>& chunks) {
  std::vector<uint64_t> offsets{0};
  for (const ScreenChunk& c : chunks) offsets.push_back(offsets.back() + c.numel);
  return offsets;
}

std::vector<ScreenChunk> ChunksOf(const std::vector<uint64_t>& sizes) {
  std::vector<ScreenChunk> out;
  uint64_t off = 0;
  for (uint64_t s : sizes) {
    out.push_back(ScreenChunk{off, s});
    off += s;
  }
  return out;
}

bool ParseRobust(const std::string& text, Robust* out) {
  if (text == "off") *out = Robust::kOff;
  else if (text == "clip") *out = Robust::kClip;
  else if (text == "reject") *out = Robust::kReject;
  else if (text == "trimmed") *out = Robust::kTrimmed;
  else return false;
  return true;
}

}  // namespace muloco
