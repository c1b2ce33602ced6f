// The codec's CUDA backend: kernels/cuda on one stream of one device (codec_backend.h).
// Not built yet: MakeCudaBackend says why there is none.
#include "common/codec_backend.h"

namespace muloco {

absl::StatusOr<std::unique_ptr<CodecBackend>> MakeCudaBackend(int, void*) {
  return absl::UnavailableError("this build has no CUDA backend yet");
}
int CudaDeviceCount() { return 0; }

}  // namespace muloco
