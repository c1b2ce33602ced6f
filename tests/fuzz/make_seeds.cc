// Writes the decoder fuzzer's seed corpus: valid payloads of every scheme, each prefixed by
// the fuzzer's 2 control bytes (see fuzz_input.h), once decoded as given and once with the
// header fix-ups on. Every seed is checked to decode before it is written.
//
// Usage: make_seeds OUT_DIR
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codec/codec.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using muloco::TensorShape;

// Deterministic values: a mix of signs and magnitudes, with some exact zeros.
std::vector<float> Values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v[i] = (s >> 28) == 0 ? 0.0f : (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * ((s & 3) + 1);
  }
  return v;
}

bool Write(const std::string& path, uint16_t control, const std::string& payload) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const unsigned char c[2] = {static_cast<unsigned char>(control & 0xff), static_cast<unsigned char>(control >> 8)};
  const bool ok = std::fwrite(c, 1, 2, f) == 2 && std::fwrite(payload.data(), 1, payload.size(), f) == payload.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const char* specs[] = {"dense-fp32",         "dense-bf16",          "quant:bits=2,chunk=64",
                         "linear:bits=4,chunk=64", "topk:chunk=64,k=5,bits=2", "topk:chunk=64,k=5,bits=32",
                         "sign:chunk=64",      "quant:bits=8,chunk=64,vectors=same", "topk:chunk=8,k=8,bits=1",
                         "lloyd:bits=2,chunk=64", "lloyd:bits=4,chunk=64", "lloyd:bits=1,chunk=64,keep=0.5"};
  // Layouts: a small model (matrices with a partial last chunk, a dense 1-D tensor, an empty
  // tensor), one short tensor, and nothing at all.
  const std::vector<std::vector<TensorShape>> layouts = {
      {{10, 640, false}, {1, 37, true}, {3, 300, false}, {1, 0, false}},
      {{1, 13, false}},
      {},
  };
  int written = 0;
  for (const char* spec : specs) {
    const absl::StatusOr<muloco::CodecConfig> config = muloco::ParseCodec(spec);
    if (!config.ok()) {
      std::fprintf(stderr, "make_seeds: %s\n", config.status().ToString().c_str());
      return 1;
    }
    for (size_t l = 0; l < layouts.size(); ++l) {
      const std::vector<muloco::Segment> segments = muloco::PlanSegments(layouts[l], *config);
      uint32_t n = 0;
      for (const muloco::Segment& s : segments) n += static_cast<uint32_t>(s.numel);
      const std::vector<float> x = Values(n, static_cast<uint32_t>(written + 1));
      const std::string payload = muloco::Encode(segments, x.data());
      std::vector<float> sum(n, 0.0f);
      if (absl::Status s = muloco::DecodeAccumulate(payload, n, sum.data()); !s.ok()) {
        std::fprintf(stderr, "make_seeds: %s payload does not decode: %s\n", spec, s.ToString().c_str());
        return 1;
      }
      std::string name = std::string(muloco::CodecName(*config)) + "_layout" + std::to_string(l);
      for (char& c : name) {
        if (c == ':' || c == ',' || c == '=') c = '_';
      }
      for (uint16_t fixes : {uint16_t{0}, muloco::fuzz::kFixAll}) {
        const std::string path = dir + "/" + name + (fixes ? "_fixed" : "_raw");
        if (!Write(path, muloco::fuzz::Control(fixes, n), payload)) {
          std::fprintf(stderr, "make_seeds: cannot write %s\n", path.c_str());
          return 1;
        }
        ++written;
      }
    }
  }
  std::printf("make_seeds: wrote %d seeds to %s\n", written, dir.c_str());
  return 0;
}
