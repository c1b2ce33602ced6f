// NormScreen (see screen.h).
#include "server/screen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace muloco {
namespace {

double Median(std::vector<double> v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2) return hi;
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + mid));
}

}  // namespace

double NormScreen::Threshold(const std::vector<double>& round_norms) const {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (options_.mode == Robust::kOff) return kInf;
  // Zero norms (empty updates) say nothing about an honest update's size; a majority of
  // them must not drive the threshold to zero and stop training.
  std::vector<double> samples;
  for (double v : round_norms)
    if (v > 0) samples.push_back(v);
  for (const std::vector<double>& r : history_) samples.insert(samples.end(), r.begin(), r.end());
  if (samples.size() < std::max<size_t>(1, options_.min_samples)) {
    // Too few norms for a median and MAD, but two or more can still be judged: none may be
    // more than pair_factor times the smallest (else a lone attacker beside one honest worker,
    // in a run's first round, would pass unclipped: the mean of two is no statistic).
    if (samples.size() < 2) return kInf;
    return options_.pair_factor * *std::min_element(samples.begin(), samples.end());
  }
  const double med = Median(samples);
  std::vector<double> dev(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) dev[i] = std::fabs(samples[i] - med);
  const double mad = Median(std::move(dev));
  return std::max(med + options_.mad_factor * 1.4826 * mad, options_.median_factor * med);
}

double NormScreen::SafeBound(const std::vector<double>& round_norms, size_t unknown) const {
  if (options_.mode == Robust::kOff || unknown == 0) return Threshold(round_norms);
  std::vector<double> samples;
  for (double v : round_norms)
    if (v > 0) samples.push_back(v);
  for (const std::vector<double>& r : history_) samples.insert(samples.end(), r.begin(), r.end());
  // Unknown norms count only if non-zero, so the final count is between k and k + u, never
  // below min_samples once k reaches it (else the pair rule could still apply: no promise).
  const size_t k = samples.size(), u = unknown;
  if (k < std::max<size_t>(1, options_.min_samples)) return 0;
  // The final median is at least the final samples' element ceil(n/2) - 1 (ascending, n
  // of them); each unknown placed below the known ones shifts that index down by one, and
  // n = k + u (all unknowns non-zero) is the lowest it can be pushed.
  const size_t rank = (k + u + 1) / 2;  // ceil((k + u) / 2): the 1-based rank of that element
  if (rank <= u) return 0;
  std::nth_element(samples.begin(), samples.begin() + (rank - 1 - u), samples.end());
  // Threshold >= median_factor * median, and the median >= this element.
  return options_.median_factor * samples[rank - 1 - u];
}

void NormScreen::Remember(std::vector<double> accepted_norms) {
  if (options_.history_rounds == 0) return;
  accepted_norms.erase(std::remove(accepted_norms.begin(), accepted_norms.end(), 0.0), accepted_norms.end());
  history_.push_back(std::move(accepted_norms));
  while (history_.size() > options_.history_rounds) history_.pop_front();
}

bool ParseRobust(const std::string& text, Robust* out) {
  if (text == "off") *out = Robust::kOff;
  else if (text == "clip") *out = Robust::kClip;
  else if (text == "reject") *out = Robust::kReject;
  else return false;
  return true;
}

}  // namespace muloco
