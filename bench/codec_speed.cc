// codec_speed: single-core throughput of the payload codec (codec/codec.h) per scheme, set
// beside memcpy of the same fp32 buffer in the same run, plus raw CPU kernel timings
// (kernels/*.h) at one size to show where the time goes. A benchmark, not a timed test.
//
//   codec_speed [--sizes=1M,16M,64M] [--repeats=3] [--kernel_size=16M]
//               [--specs="dense-bf16;quant:bits=2,chunk=4096;..."]
//
// Sizes take K/M/G suffixes (powers of two); --kernel_size=0 skips the kernel section.
// Specs are ParseCodec strings separated by ';' (a spec holds commas). Each size gets a
// buffer of N(0,1) fp32 values (fixed seed) as one matrix tensor, and per scheme:
//   compress  Compress(segments, delta, 1, ef): fused ef += delta, encode, ef -= decoded,
//             checksum (the worker's path; ef is zeroed, untimed, before each run)
//   encode    Encode(segments, x): plain encoding (Encode copies x into a scratch buffer)
//   decode    DecodeAccumulate(payload, N, sum): validation + sum += decoded (the server's
//             per-worker step; decoding into a zeroed sum is the same call)
// Every time is the best of --repeats runs. memcpy of the same buffer is timed before every
// timed run (and 5 times per block), and each block is set against its best memcpy. GB/s is
// counted on the fp32 input, 4N bytes, for every row (memcpy too), and "vs memcpy" =
// memcpy time / op time: 0.25 is 4x slower.
// Single-threaded throughout (the codec is); nothing is pinned.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "kernels/bitpack.h"
#include "kernels/error_feedback.h"
#include "kernels/quantize.h"
#include "kernels/sign.h"
#include "kernels/topk.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace kc = muloco::kernels::cpu;

constexpr const char* kDefaultSpecs =
    "dense-bf16;quant:bits=2,chunk=4096;linear:bits=2,chunk=256;quant:bits=4,chunk=4096;"
    "topk:chunk=4096,k=32,bits=2;sign:chunk=4096";

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "codec_speed: %s\nusage: codec_speed [--sizes=1M,16M,64M] [--repeats=3] [--kernel_size=16M]\n"
               "                   [--specs=\"spec;spec;...\"]\n",
               why.c_str());
  std::exit(2);
}

// "16M" -> 16 * 2^20. K, M, G are powers of two.
bool ParseSize(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) return false;
  uint64_t mult = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") mult = uint64_t{1} << 10;
  else if (suffix == "M" || suffix == "m") mult = uint64_t{1} << 20;
  else if (suffix == "G" || suffix == "g") mult = uint64_t{1} << 30;
  else if (!suffix.empty()) return false;
  *out = static_cast<uint64_t>(v) * mult;
  return true;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t p = s.find(sep, start);
    std::string part = s.substr(start, p == std::string::npos ? std::string::npos : p - start);
    if (!part.empty()) out.push_back(part);
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

std::string SizeName(uint64_t n) {
  if (n % (uint64_t{1} << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n % (uint64_t{1} << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

// N(0,1) values: splitmix64 feeding Box-Muller (deterministic, fast enough for 64M values).
void FillNormal(float* x, size_t n, uint64_t seed) {
  uint64_t state = seed;
  auto next = [&state]() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  auto uniform = [&next]() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  for (size_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform())), t = 2.0 * M_PI * uniform();
    x[i] = static_cast<float>(r * std::cos(t));
    if (i + 1 < n) x[i + 1] = static_cast<float>(r * std::sin(t));
  }
}

// Best (smallest) seconds of `repeats` runs of op; setup runs untimed before each.
double Best(int repeats, const std::function<void()>& op, const std::function<void()>& setup = nullptr) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    if (setup) setup();
    const auto t0 = Clock::now();
    op();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
  }
  return best;
}

// The 1-minute load average (other work on the machine skews the timings).
std::string LoadAverage() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return "unknown";
  char buf[64] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok) return "unknown";
  std::string s(buf);
  return s.substr(0, s.find(' '));
}

volatile uint64_t g_sink = 0;  // keeps results observable

// The memcpy reference of one block: memcpy of the block's n floats (src -> dst, both faulted
// in), timed 5 times up front and once more before every timed run of every op, so the
// reference sees the same machine as the ops (the other work on a shared machine comes and
// goes). The block's rows are printed against the best of all these.
struct MemcpyRef {
  const float* src;
  float* dst;
  size_t n;
  double best = 1e300;
  void Probe() {
    const auto t0 = Clock::now();
    std::memcpy(dst, src, n * sizeof(float));
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    g_sink = g_sink + static_cast<uint64_t>(dst[n / 2] != 0.0f);
  }
};

struct Row {
  std::string label, op;
  double seconds, aim;  // aim: allowed slowdown vs memcpy, 0 = none stated
};

void PrintRows(const char* first, const std::vector<Row>& rows, size_t n, double memcpy_s) {
  std::printf("  %-34s %-9s %10s %8s %9s %8s   %s\n", first, "op", "ms", "GB/s", "vs memcpy", "slower", "aim");
  for (const Row& r : rows) {
    const double gbs = 4.0 * static_cast<double>(n) / r.seconds / 1e9;
    const double ratio = memcpy_s / r.seconds;
    char aim_text[48] = "-";
    if (r.aim > 0) std::snprintf(aim_text, sizeof aim_text, "%gx: %s", r.aim, ratio * r.aim >= 1.0 ? "meets" : "MISSES");
    std::printf("  %-34s %-9s %10.2f %8.2f %9.3f %7.1fx   %s\n", r.label.c_str(), r.op.c_str(), r.seconds * 1e3, gbs,
                ratio, 1.0 / ratio, aim_text);
  }
  std::fflush(stdout);
}

// The aims for the encode side: quantize, sign-pack, EF within 4x of memcpy,
// top-k within 8x. dense-bf16 is a plain conversion; held to 4x as well.
double EncodeAim(muloco::Scheme s) { return s == muloco::Scheme::kTopK ? 8.0 : 4.0; }

void RunCodecs(const std::vector<uint64_t>& sizes, const std::vector<std::string>& specs, int repeats) {
  for (uint64_t n : sizes) {
    std::vector<float> x(n), dst(n), ef(n), sum(n, 0.0f);
    FillNormal(x.data(), n, 0x5eed0000ULL + n);
    std::fill(dst.begin(), dst.end(), 1.0f);  // fault the pages in
    std::fill(ef.begin(), ef.end(), 0.0f);
    MemcpyRef ref{x.data(), dst.data(), n};
    for (int r = 0; r < 5; ++r) ref.Probe();
    std::vector<Row> rows;
    for (const std::string& spec : specs) {
      absl::StatusOr<muloco::CodecConfig> config = muloco::ParseCodec(spec);
      if (!config.ok()) Usage(config.status().ToString());
      const std::vector<muloco::Segment> segments =
          muloco::PlanSegments({muloco::TensorShape{1, n, false}}, *config);
      const uint64_t payload_bytes = muloco::PayloadBytes(segments);
      char label[64];
      std::snprintf(label, sizeof label, "%s (%.1fx)", muloco::CodecName(*config).c_str(),
                    4.0 * static_cast<double>(n) / static_cast<double>(payload_bytes));
      std::string payload;
      const double t_comp = Best(
          repeats, [&] { payload = muloco::Compress(segments, x.data(), 1.0f, ef.data()); },
          [&] {
            std::fill(ef.begin(), ef.end(), 0.0f);
            ref.Probe();
          });
      if (payload.size() != payload_bytes) {
        std::fprintf(stderr, "codec_speed: %s: payload %zu bytes, expected %llu\n", spec.c_str(), payload.size(),
                     static_cast<unsigned long long>(payload_bytes));
        std::exit(1);
      }
      std::string plain;
      const double t_enc = Best(
          repeats, [&] { plain = muloco::Encode(segments, x.data()); }, [&] { ref.Probe(); });
      g_sink = g_sink + plain.size();
      plain = std::string();
      const double t_dec = Best(repeats, [&] {
        absl::Status s = muloco::DecodeAccumulate(payload, n, sum.data());
        if (!s.ok()) {
          std::fprintf(stderr, "codec_speed: %s: %s\n", spec.c_str(), s.ToString().c_str());
          std::exit(1);
        }
      }, [&] { ref.Probe(); });
      const double aim = EncodeAim(config->scheme);
      rows.push_back({label, "compress", t_comp, aim});
      rows.push_back({"", "encode", t_enc, aim});
      rows.push_back({"", "decode", t_dec, 0});
    }
    std::printf("\nN = %s (%llu fp32 = %.0f MiB)   memcpy (best in block): %.2f ms, %.2f GB/s\n", SizeName(n).c_str(),
                static_cast<unsigned long long>(n), 4.0 * n / (1 << 20), ref.best * 1e3, 4.0 * n / ref.best / 1e9);
    PrintRows("scheme (compression ratio)", rows, n, ref.best);
    g_sink = g_sink + static_cast<uint64_t>(sum[n / 3] != 0.0f);
  }
}

// Buffers for the raw kernels: inputs, per-chunk scratch (codes, lut, indices) reused, and
// outputs that the payload keeps (packed codes, sign bits) laid out over the whole buffer.
struct KernelBuffers {
  static constexpr size_t kChunk = 4096, kK = 32;
  explicit KernelBuffers(uint64_t n_in)
      : nc(n_in / kChunk), n(nc * kChunk), x(n), dst(n, 1.0f), e(n), sum(n, 0.0f), codes(kChunk),
        packed(muloco::kernels::PackedBytes(n, 2)), signs(muloco::kernels::PackedBytes(n, 1)), all_codes(n), idx(kK),
        counts(n, 0) {
    FillNormal(x.data(), n, 0x6b65726eULL);
    // Codes for PackCodes / UnpackCodes / DequantizeAccumulate, from a real quantization.
    for (size_t c = 0; c < nc; ++c) kc::StatQuantize(x.data() + c * kChunk, kChunk, 2, lut, all_codes.data() + c * kChunk);
  }
  float* X(size_t c) { return x.data() + c * kChunk; }
  uint8_t* Codes(size_t c) { return all_codes.data() + c * kChunk; }
  float* Sum(size_t c) { return sum.data() + c * kChunk; }
  // Something of every output, so the compiler keeps the work.
  uint64_t Sink() const {
    return packed[n / 8] + signs[n / 16] + idx[0] + static_cast<uint64_t>(sum[n / 2] != 0.0f) +
           static_cast<uint64_t>(lut[0] != 0.0f) + static_cast<uint64_t>(e[n / 2] != 0.0f) +
           static_cast<uint64_t>(counts[n / 2]);
  }

  const size_t nc, n;
  std::vector<float> x, dst, e, sum;
  std::vector<uint8_t> codes, packed, signs, all_codes;
  std::vector<uint32_t> idx;
  std::vector<int32_t> counts;
  float lut[256] = {};
};

struct KernelItem {
  const char* name;
  double aim;
  std::function<void(size_t chunk)> op;
  std::function<void()> setup = nullptr;
};

// Each kernel as the codec calls it, on one chunk.
std::vector<KernelItem> KernelItems(KernelBuffers& b) {
  constexpr size_t kChunk = KernelBuffers::kChunk;
  return {
      {"StatQuantize 2-bit", 4, [&](size_t c) { kc::StatQuantize(b.X(c), kChunk, 2, b.lut, b.codes.data()); }},
      {"GaussianQuantize 2-bit", 4, [&](size_t c) { kc::GaussianQuantize(b.X(c), kChunk, 2, b.lut, b.codes.data()); }},
      {"LinearQuantize 2-bit", 4,
       [&](size_t c) {
         float lo, step;
         kc::LinearQuantize(b.X(c), kChunk, 2, &lo, &step, b.codes.data());
       }},
      {"PackCodes 2-bit", 4, [&](size_t c) { kc::PackCodes(b.Codes(c), kChunk, 2, b.packed.data() + c * kChunk / 4); }},
      {"MeanAbs", 4, [&](size_t c) { b.lut[0] += kc::MeanAbs(b.X(c), kChunk); }},
      {"SignPack", 4, [&](size_t c) { kc::SignPack(b.X(c), kChunk, c * kChunk, b.signs.data() + c * kChunk / 8); }},
      {"EfUpdate (beta 1)", 4, [&](size_t c) { kc::EfUpdate(b.e.data() + c * kChunk, b.X(c), kChunk, 1.0f); },
       [&] { std::fill(b.e.begin(), b.e.end(), 0.0f); }},
      {"TopKChunk k=32", 8, [&](size_t c) { kc::TopKChunk(b.X(c), kChunk, KernelBuffers::kK, b.idx.data()); }},
      {"UnpackCodes 2-bit", 0, [&](size_t c) { kc::UnpackCodes(b.packed.data() + c * kChunk / 4, kChunk, 2, b.Codes(c)); }},
      {"DequantizeAccumulate", 0, [&](size_t c) { kc::DequantizeAccumulate(b.lut, b.Codes(c), kChunk, b.Sum(c)); }},
      {"SignAccumulate", 0, [&](size_t c) { kc::SignAccumulate(b.signs.data() + c * kChunk / 8, kChunk, 0.5f, b.Sum(c)); }},
      {"VoteAccumulate", 0,
       [&](size_t c) { kc::VoteAccumulate(b.signs.data() + c * kChunk / 8, kChunk, b.counts.data() + c * kChunk); }},
  };
}

// Raw kernels over 4096-element chunks, as the codec calls them.
void RunKernels(uint64_t n, int repeats) {
  KernelBuffers b(n);
  if (b.nc == 0) return;
  MemcpyRef ref{b.x.data(), b.dst.data(), b.n};
  for (int r = 0; r < 5; ++r) ref.Probe();
  std::vector<Row> rows;
  for (const KernelItem& it : KernelItems(b)) {
    const double t = Best(
        repeats, [&] { for (size_t c = 0; c < b.nc; ++c) it.op(c); },
        [&] {
          if (it.setup) it.setup();
          ref.Probe();
        });
    rows.push_back({it.name, "", t, it.aim});
  }
  std::printf("\nRaw CPU kernels, N = %s in %zu chunks of %zu   memcpy (best in block): %.2f ms, %.2f GB/s\n",
              SizeName(b.n).c_str(), b.nc, KernelBuffers::kChunk, ref.best * 1e3, 4.0 * b.n / ref.best / 1e9);
  PrintRows("kernel", rows, b.n, ref.best);
  g_sink = g_sink + b.Sink();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<uint64_t> sizes;
  for (const std::string& s : Split("1M,16M,64M", ',')) {
    uint64_t v = 0;
    ParseSize(s, &v);
    sizes.push_back(v);
  }
  std::string specs_arg = kDefaultSpecs;
  int repeats = 3;
  uint64_t kernel_size = uint64_t{16} << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* key, std::string* out) {
      const std::string prefix = std::string(key) + "=";
      if (a.compare(0, prefix.size(), prefix) != 0) return false;
      *out = a.substr(prefix.size());
      return true;
    };
    std::string v;
    if (a == "--help" || a == "-h") {
      Usage("help");
    } else if (value("--sizes", &v)) {
      sizes.clear();
      for (const std::string& s : Split(v, ',')) {
        uint64_t n = 0;
        if (!ParseSize(s, &n) || n == 0) Usage("bad size '" + s + "'");
        sizes.push_back(n);
      }
    } else if (value("--repeats", &v)) {
      repeats = std::atoi(v.c_str());
      if (repeats < 1) Usage("--repeats must be >= 1");
    } else if (value("--specs", &v)) {
      specs_arg = v;
    } else if (value("--kernel_size", &v)) {
      if (!ParseSize(v, &kernel_size)) Usage("bad --kernel_size '" + v + "'");
    } else {
      Usage("unknown argument '" + a + "'");
    }
  }
  const std::vector<std::string> specs = Split(specs_arg, ';');
  for (const std::string& s : specs) {
    absl::StatusOr<muloco::CodecConfig> c = muloco::ParseCodec(s);
    if (!c.ok()) Usage(c.status().ToString());
  }

  std::printf("codec_speed: one thread, best of %d runs; GB/s on the fp32 input (4N bytes);\n", repeats);
  std::printf("vs memcpy = memcpy time / op time (0.25 = 4x slower); aim: encode side within 4x of\n");
  std::printf("memcpy (top-k 8x); compression ratio = 4N / payload bytes\n");
  std::printf("load average (1 min) at start: %s\n", LoadAverage().c_str());
  const auto t0 = Clock::now();
  RunCodecs(sizes, specs, repeats);
  if (kernel_size > 0) RunKernels(kernel_size, repeats);
  std::printf("\nload average (1 min) at end: %s; total %.0f s\n", LoadAverage().c_str(),
              std::chrono::duration<double>(Clock::now() - t0).count());
  return 0;
}
