// Splitting work over threads by element counts: the codec's per-segment work and the
// server's per-tensor screening both run contiguous ranges of units on a few threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace muloco {

// Runs fn(first, last) over contiguous ranges of units (unit i spans elements
// [offset[i], offset[i + 1])) holding about equal elements, one range per thread, on up to
// `threads` threads (the caller's thread when one). REQUIRES: offset non-empty, ascending.
void ParallelUnits(const std::vector<uint64_t>& offset, int threads, const std::function<void(size_t, size_t)>& fn);

}  // namespace muloco
