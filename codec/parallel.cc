// ParallelUnits (see parallel.h).
#include "codec/parallel.h"

#include <algorithm>
#include <thread>

namespace muloco {

void ParallelUnits(const std::vector<uint64_t>& offset, int threads, const std::function<void(size_t, size_t)>& fn) {
  const size_t units = offset.size() - 1;
  const size_t workers = std::max<size_t>(1, std::min<size_t>(std::max(threads, 1), units));
  if (workers == 1) return fn(0, units);
  std::vector<size_t> cut{0};
  for (size_t t = 1; t < workers; ++t) {
    const uint64_t target = offset.back() * t / workers;
    size_t u = cut.back();
    while (u < units && offset[u + 1] <= target) ++u;
    cut.push_back(u);
  }
  cut.push_back(units);
  std::vector<std::thread> pool;
  for (size_t t = 0; t + 1 < cut.size(); ++t) {
    if (cut[t] < cut[t + 1]) pool.emplace_back(fn, cut[t], cut[t + 1]);
  }
  for (std::thread& th : pool) th.join();
}

}  // namespace muloco
