// xxHash64 wrapper.
#include "codec/checksum.h"

#include <xxhash.h>

namespace muloco {

uint64_t Checksum64(const void* data, size_t bytes, uint64_t seed) {
  return XXH64(data, bytes, seed);
}

}  // namespace muloco
