// Robust screening of pushed pseudo-gradients: before a round's updates are summed, each
// worker's L2 norm is compared with a threshold from robust statistics (median and MAD) of
// this round's norms and of the norms accepted in recent rounds, so that one hostile or
// broken worker cannot dominate the mean. SignMuon's votes need none of this: every worker
// adds exactly +-1 per coordinate, so its influence is bounded by construction.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

namespace muloco {

enum class Robust {
  kOff,     // every validated update is summed as it is
  kClip,    // an update above the threshold is scaled down to it
  kReject,  // an update above the threshold is left out of the round
};

struct ScreenOptions {
  Robust mode = Robust::kClip;
  double mad_factor = 3.0;     // threshold >= median + mad_factor * 1.4826 * MAD (a Gaussian's 3 sigma)
  double median_factor = 1.5;  // and >= median_factor * median (honest norms are rarely that far apart)
  size_t min_samples = 3;      // fewer norms than this (this round + history): see pair_factor
  double pair_factor = 4.0;    // below min_samples, a norm above pair_factor x the smallest is
                               // screened (honest pairs rarely differ 4x); one norm alone is not
  size_t history_rounds = 4;   // rounds of accepted norms that join this round's
};

class NormScreen {
 public:
  explicit NormScreen(ScreenOptions options) : options_(options) {}

  // The largest norm accepted unchanged in a round whose pushes have `round_norms`;
  // +infinity when screening is off or there are too few non-zero samples to judge.
  double Threshold(const std::vector<double>& round_norms) const;
  // A norm at or below this is accepted unchanged however the round ends, when at most
  // `unknown` more pushes (of any norms, zeros included) may join `round_norms`: what lets
  // the engine sum a push as it arrives instead of holding it until the close. 0 while too
  // few norms are known to promise anything; Threshold(round_norms) when unknown is 0.
  double SafeBound(const std::vector<double>& round_norms, size_t unknown) const;
  // Records a closed round's norms as summed (after clipping; rejected ones and zeros left out).
  void Remember(std::vector<double> accepted_norms);
  Robust mode() const { return options_.mode; }

 private:
  const ScreenOptions options_;
  std::deque<std::vector<double>> history_;
};

// "off" | "clip" | "reject"; false for anything else.
bool ParseRobust(const std::string& text, Robust* out);

}  // namespace muloco
