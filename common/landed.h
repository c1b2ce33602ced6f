// What share of a pushed update counted in the round's aggregate, by parameter range: the
// server's screening may clip a tensor or cut a participant's weight, and tells the worker so
// that its error feedback keeps what did not land (worker/uplink.h).
#pragma once

#include <cstdint>

namespace muloco {

struct LandedRange {
  uint64_t offset = 0, count = 0;  // parameters [offset, offset + count)
  float fraction = 1;              // the share of the pushed values there that counted, in [0, 1]
};

}  // namespace muloco
