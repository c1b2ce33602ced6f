// Medians of small samples, in one place for the server's rules (screening, the async grace
// window, the adaptive-H pace). REQUIRES: a non-empty sample.
#pragma once

#include <algorithm>
#include <vector>

namespace muloco {

// The median; of an even count, the mean of the middle pair. Reorders *v.
template <typename T>
T MedianInPlace(std::vector<T>* v) {
  const size_t mid = v->size() / 2;
  std::nth_element(v->begin(), v->begin() + mid, v->end());
  const T hi = (*v)[mid];
  if (v->size() % 2) return hi;
  return T(0.5) * (hi + *std::max_element(v->begin(), v->begin() + mid));
}

inline double Median(std::vector<double> v) { return MedianInPlace(&v); }

// The lower median: of an even count, the smaller of the middle pair, so that the upper half
// of a sample cannot raise it (one of two participants, a minority of liars).
inline double LowerMedian(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + (v.size() - 1) / 2, v.end());
  return v[(v.size() - 1) / 2];
}

}  // namespace muloco
