// Payload encoding with error feedback, and validated decoding (see codec.h).
#include "common/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/checksum.h"
#include "kernels/bitpack.h"
#include "kernels/error_feedback.h"
#include "kernels/quantize.h"
#include "kernels/sign.h"
#include "kernels/topk.h"

namespace muloco {
namespace {

namespace kc = kernels::cpu;
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "payloads are little-endian");
constexpr char kMagic[4] = {'M', 'L', 'C', 'P'};
constexpr uint64_t kBodySeed = 0x626f6479ULL;
constexpr uint64_t kMaxNumel = uint64_t{1} << 40;
constexpr uint32_t kMaxChunk = uint32_t{1} << 24;

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError("payload: " + m); }

const char* Name(Scheme s) {
  switch (s) {
    case Scheme::kDenseFp32: return "dense-fp32";
    case Scheme::kDenseBf16: return "dense-bf16";
    case Scheme::kQuant: return "quant";
    case Scheme::kLloyd: return "lloyd";
    case Scheme::kLinear: return "linear";
    case Scheme::kTopK: return "topk";
    case Scheme::kSign: return "sign";
  }
  return "unknown";
}

bool IsPow2(uint32_t v) { return v >= 2 && (v & (v - 1)) == 0; }
int Log2(uint32_t v) { return 31 - __builtin_clz(v); }
uint64_t NumChunks(const Segment& s) { return s.chunk ? (s.numel + s.chunk - 1) / s.chunk : 0; }
uint64_t ChunkLen(const Segment& s, uint64_t c) { return std::min<uint64_t>(s.chunk, s.numel - c * s.chunk); }
uint64_t TotalK(const Segment& s) {
  return (s.numel / s.chunk) * s.k + std::min<uint64_t>(s.k, s.numel % s.chunk);
}

// Checks a segment's parameters (from a peer or a config) before any size is computed.
absl::Status CheckSegment(const Segment& s) {
  auto bad = [&](const std::string& m) { return Bad(absl::StrCat(Name(s.scheme), " segment: ", m)); };
  if (s.numel > kMaxNumel) return bad("too many elements");
  if (s.rows < 1 || s.numel % s.rows != 0) return bad("rows do not divide the element count");
  const bool chunked_ok = s.chunk >= 8 && s.chunk <= kMaxChunk && s.chunk % 8 == 0;
  switch (s.scheme) {
    case Scheme::kDenseFp32:
      if (s.bits != 32 || s.chunk || s.k) return bad("needs bits 32, no chunk, no k");
      return absl::OkStatus();
    case Scheme::kDenseBf16:
      if (s.bits != 16 || s.chunk || s.k) return bad("needs bits 16, no chunk, no k");
      return absl::OkStatus();
    case Scheme::kLloyd:
      if (!kernels::ValidGaussianBits(s.bits)) return bad(absl::StrCat("bits ", s.bits, " not in {1,2,4}"));
      [[fallthrough]];
    case Scheme::kQuant:
    case Scheme::kLinear:
      if (!kernels::ValidCodeBits(s.bits)) return bad(absl::StrCat("bits ", s.bits, " not in {1,2,4,8}"));
      if (!chunked_ok || s.k) return bad("chunk must be a multiple of 8 in [8, 2^24]; no k");
      return absl::OkStatus();
    case Scheme::kTopK:
      if (!kernels::ValidCodeBits(s.bits) && s.bits != 32) return bad(absl::StrCat("bits ", s.bits, " not in {1,2,4,8,32}"));
      if (!IsPow2(s.chunk) || s.chunk > kMaxChunk) return bad("chunk must be a power of two in [2, 2^24]");
      if (s.k < 1 || s.k > s.chunk) return bad("k must be in [1, chunk]");
      return absl::OkStatus();
    case Scheme::kSign:
      if (s.bits != 1 || !chunked_ok || s.k) return bad("needs bits 1, chunk a multiple of 8 in [8, 2^24], no k");
      return absl::OkStatus();
  }
  return Bad(absl::StrCat("unknown scheme ", static_cast<int>(s.scheme)));
}

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (inputs are finite)
  return static_cast<uint16_t>(u >> 16);
}
float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Finite and within kMaxAbsValue (a NaN fails the comparison too).
bool InRange(float v) { return std::fabs(v) <= kMaxAbsValue; }
bool AllInRange(const char* p, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i)
    if (!InRange(Load<float>(p + 4 * i))) return false;
  return true;
}

// --- encoding ----------------------------------------------------------------------------

// Encodes one segment of ef (updating it with delta first, if given) into dst. `tie_seed`:
// the sign coins of this segment's zero elements start at it (kernels/sign.h).
void CompressSegment(const Segment& s, const float* delta, float beta, float* e, char* dst, uint64_t tie_seed) {
  const uint64_t n = s.numel;
  auto update = [&](uint64_t off, uint64_t len) {
    if (delta) kc::EfUpdate(e + off, delta + off, len, beta);
  };
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<uint32_t> idx;
  thread_local std::vector<float> vals;
  const int nbins = s.bits <= 8 ? kernels::NumBins(s.bits) : 0;
  switch (s.scheme) {
    case Scheme::kDenseFp32:
      update(0, n);
      if (n) std::memcpy(dst, e, n * 4);
      std::fill(e, e + n, 0.0f);  // e - e
      return;
    case Scheme::kDenseBf16:
      update(0, n);
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = ToBf16(e[i]);
        Store<uint16_t>(dst + 2 * i, h);
        e[i] -= FromBf16(h);
      }
      return;
    case Scheme::kQuant:
    case Scheme::kLloyd:
    case Scheme::kLinear: {
      const uint64_t meta = s.scheme == Scheme::kLinear ? 2 : nbins;
      char* code_base = dst + NumChunks(s) * meta * 4;
      float lut[256];
      for (uint64_t c = 0; c < NumChunks(s); ++c) {
        const uint64_t off = c * s.chunk, len = ChunkLen(s, c);
        update(off, len);
        codes.resize(len);
        if (s.scheme != Scheme::kLinear) {
          if (s.scheme == Scheme::kQuant) {
            kc::StatQuantize(e + off, len, s.bits, lut, codes.data());
          } else {
            kc::GaussianQuantize(e + off, len, s.bits, lut, codes.data());
          }
          std::memcpy(dst + c * meta * 4, lut, nbins * 4);
        } else {
          float lo, step;
          kc::LinearQuantize(e + off, len, s.bits, &lo, &step, codes.data());
          Store<float>(dst + c * 8, lo);
          Store<float>(dst + c * 8 + 4, step);
          kernels::LinearTable(lo, step, s.bits, lut);
        }
        kc::PackCodes(codes.data(), len, s.bits, reinterpret_cast<uint8_t*>(code_base + off * s.bits / 8));
        for (int b = 0; b < nbins; ++b) lut[b] = -lut[b];
        kc::DequantizeAccumulate(lut, codes.data(), len, e + off);  // e -= decoded
      }
      return;
    }
    case Scheme::kTopK: {
      const uint64_t total = TotalK(s);
      idx.resize(total);
      vals.resize(total);
      uint64_t t = 0;
      for (uint64_t c = 0; c < NumChunks(s); ++c) {
        const uint64_t off = c * s.chunk, len = ChunkLen(s, c), k = std::min<uint64_t>(s.k, len);
        update(off, len);
        kc::TopKChunk(e + off, len, k, idx.data() + t);
        for (uint64_t j = 0; j < k; ++j) vals[t + j] = e[off + idx[t + j]];
        t += k;
      }
      char* p = dst;
      float lut[256];
      if (s.bits < 32) {
        codes.resize(total);
        kc::StatQuantize(vals.data(), total, s.bits, lut, codes.data());
        std::memcpy(p, lut, nbins * 4);
        p += nbins * 4;
      }
      kc::PackIndices(idx.data(), total, Log2(s.chunk), reinterpret_cast<uint8_t*>(p));
      p += kernels::PackedBytes(total, Log2(s.chunk));
      if (s.bits == 32) {
        if (total) std::memcpy(p, vals.data(), total * 4);
      } else {
        kc::PackCodes(codes.data(), total, s.bits, reinterpret_cast<uint8_t*>(p));
      }
      t = 0;
      for (uint64_t c = 0; c < NumChunks(s); ++c) {
        const uint64_t off = c * s.chunk, k = std::min<uint64_t>(s.k, ChunkLen(s, c));
        for (uint64_t j = 0; j < k; ++j, ++t) e[off + idx[t]] -= s.bits == 32 ? vals[t] : lut[codes[t]];
      }
      return;
    }
    case Scheme::kSign: {
      char* bits = dst + NumChunks(s) * 4;
      for (uint64_t c = 0; c < NumChunks(s); ++c) {
        const uint64_t off = c * s.chunk, len = ChunkLen(s, c);
        update(off, len);
        const float scale = kc::MeanAbs(e + off, len);
        Store<float>(dst + c * 4, scale);
        uint8_t* b = reinterpret_cast<uint8_t*>(bits + off / 8);
        kc::SignPack(e + off, len, tie_seed + off, b);
        kc::SignAccumulate(b, len, -scale, e + off);  // e -= decoded
      }
      return;
    }
  }
}

// --- decoding ----------------------------------------------------------------------------

// Validates (kWrite false) or accumulates (kWrite true) one segment's data.
template <bool kWrite>
absl::Status DecodeSegment(const Segment& s, const char* d, float* sum) {
  const uint64_t n = s.numel;
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<uint32_t> idx;
  const int nbins = s.bits <= 8 ? kernels::NumBins(s.bits) : 0;
  switch (s.scheme) {
    case Scheme::kDenseFp32:
      if (!kWrite) return AllInRange(d, n) ? absl::OkStatus() : Bad("value non-finite or beyond the limit");
      for (uint64_t i = 0; i < n; ++i) sum[i] += Load<float>(d + 4 * i);
      return absl::OkStatus();
    case Scheme::kDenseBf16:
      for (uint64_t i = 0; i < n; ++i) {
        const float v = FromBf16(Load<uint16_t>(d + 2 * i));
        if (!kWrite && !InRange(v)) return Bad("bf16 value non-finite or beyond the limit");
        if (kWrite) sum[i] += v;
      }
      return absl::OkStatus();
    case Scheme::kQuant:
    case Scheme::kLloyd:
    case Scheme::kLinear: {
      const bool stat = s.scheme != Scheme::kLinear;  // a decode table per chunk
      const uint64_t meta = stat ? nbins : 2;
      const char* code_base = d + NumChunks(s) * meta * 4;
      float lut[256];
      for (uint64_t c = 0; c < NumChunks(s); ++c) {
        const char* m = d + c * meta * 4;
        if (stat) {
          std::memcpy(lut, m, nbins * 4);
        } else {
          kernels::LinearTable(Load<float>(m), Load<float>(m + 4), s.bits, lut);
        }
        if (!kWrite) {
          if (!AllInRange(reinterpret_cast<const char*>(lut), nbins) || (!stat && !AllInRange(m, 2))) {
            return Bad("decode table non-finite or beyond the limit");
          }
          continue;
        }
        const uint64_t off = c * s.chunk, len = ChunkLen(s, c);
        codes.resize(len);
        kc::UnpackCodes(reinterpret_cast<const uint8_t*>(code_base + off * s.bits / 8), len, s.bits, codes.data());
        kc::DequantizeAccumulate(lut, codes.data(), len, sum + off);
      }
      return absl::OkStatus();
    }
    case Scheme::kTopK: {
      const uint64_t total = TotalK(s);
      const char* p = d;
      const float* lut = nullptr;
      float table[256];
      if (s.bits < 32) {
        std::memcpy(table, p, nbins * 4);
        if (!AllInRange(p, nbins)) return Bad("topk value table non-finite or beyond the limit");
        lut = table;
        p += nbins * 4;
      }
      idx.resize(total);
      kc::UnpackIndices(reinterpret_cast<const uint8_t*>(p), total, Log2(s.chunk), idx.data());
      p += kernels::PackedBytes(total, Log2(s.chunk));
      if (s.bits == 32 && !kWrite && !AllInRange(p, total)) return Bad("topk value non-finite or beyond the limit");
      if (s.bits < 32) {
        codes.resize(total);
        kc::UnpackCodes(reinterpret_cast<const uint8_t*>(p), total, s.bits, codes.data());
      }
      uint64_t t = 0;
      for (uint64_t c = 0; c < NumChunks(s); ++c) {
        const uint64_t off = c * s.chunk, len = ChunkLen(s, c), k = std::min<uint64_t>(s.k, len);
        for (uint64_t j = 0; j < k; ++j, ++t) {
          if (!kWrite) {
            if (idx[t] >= len) return Bad(absl::StrCat("topk index ", idx[t], " out of range in chunk ", c));
            if (j > 0 && idx[t] <= idx[t - 1]) return Bad(absl::StrCat("topk indices not ascending in chunk ", c));
            continue;
          }
          sum[off + idx[t]] += lut ? lut[codes[t]] : Load<float>(p + 4 * t);
        }
      }
      return absl::OkStatus();
    }
    case Scheme::kSign: {
      const char* bits = d + NumChunks(s) * 4;
      for (uint64_t c = 0; c < NumChunks(s); ++c) {
        const float scale = Load<float>(d + c * 4);
        if (!kWrite) {
          if (!InRange(scale) || scale < 0) return Bad("sign scale must be in [0, limit]");
          continue;
        }
        const uint64_t off = c * s.chunk;
        kc::SignAccumulate(reinterpret_cast<const uint8_t*>(bits + off / 8), ChunkLen(s, c), scale, sum + off);
      }
      return absl::OkStatus();
    }
  }
  return Bad("unknown scheme");
}

// Runs fn(first, last) over contiguous ranges of units (unit i spans elements
// [offset[i], offset[i + 1])) holding about equal elements, one range per thread, on up to
// `threads` threads (the caller's thread when one).
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

struct Parsed {
  std::vector<Segment> segments;
  std::vector<const char*> data;  // start of each segment's data
};

absl::StatusOr<Parsed> Parse(absl::string_view payload, size_t expected_elements) {
  if (payload.size() < kPayloadHeaderBytes) return Bad(absl::StrCat("truncated header (", payload.size(), " bytes)"));
  const char* h = payload.data();
  if (std::memcmp(h, kMagic, 4) != 0) return Bad("bad magic");
  if (Load<uint8_t>(h + 4) != kPayloadVersion) return Bad(absl::StrCat("unsupported format version ", Load<uint8_t>(h + 4)));
  if (Load<uint8_t>(h + 5) != 0) return Bad("reserved bits set");
  const uint64_t nseg = Load<uint16_t>(h + 6), elements = Load<uint64_t>(h + 8), body = Load<uint64_t>(h + 16);
  if (elements != expected_elements) return Bad(absl::StrCat("has ", elements, " elements, expected ", expected_elements));
  if (body != payload.size() - kPayloadHeaderBytes) return Bad(absl::StrCat("body size ", body, " does not match ", payload.size() - kPayloadHeaderBytes));
  if (nseg * kSegmentEntryBytes > body) return Bad("segment table exceeds the payload");
  if (Checksum64(h + kPayloadHeaderBytes, body, kBodySeed) != Load<uint64_t>(h + 24)) return Bad("checksum mismatch");
  Parsed out;
  const char* table = h + kPayloadHeaderBytes;
  uint64_t data_off = kPayloadHeaderBytes + nseg * kSegmentEntryBytes, total = 0;
  for (uint64_t i = 0; i < nseg; ++i) {
    const char* e = table + i * kSegmentEntryBytes;
    Segment s;
    s.scheme = static_cast<Scheme>(Load<uint8_t>(e));
    s.bits = Load<uint8_t>(e + 1);
    if (Load<uint16_t>(e + 2) != 0) return Bad("reserved segment bits set");
    s.chunk = Load<uint32_t>(e + 4);
    s.k = Load<uint32_t>(e + 8);
    s.rows = Load<uint32_t>(e + 12);
    s.numel = Load<uint64_t>(e + 16);
    if (absl::Status st = CheckSegment(s); !st.ok()) return st;
    const uint64_t bytes = Load<uint64_t>(e + 24);
    if (bytes != SegmentDataBytes(s)) return Bad(absl::StrCat("segment ", i, " declares ", bytes, " bytes, its parameters need ", SegmentDataBytes(s)));
    if (bytes > payload.size() - data_off) return Bad(absl::StrCat("segment ", i, " runs past the end"));
    total += s.numel;
    if (total > expected_elements) return Bad("segments hold more elements than declared");
    out.segments.push_back(s);
    out.data.push_back(h + data_off);
    data_off += bytes;
  }
  if (total != expected_elements) return Bad(absl::StrCat("segments hold ", total, " elements, expected ", expected_elements));
  if (data_off != payload.size()) return Bad("trailing bytes after the last segment");
  return out;
}

// Parse, then every segment's data checked (ranges, tables, indices) without writing.
absl::StatusOr<Parsed> ParseChecked(absl::string_view payload, size_t expected_elements) {
  absl::StatusOr<Parsed> p = Parse(payload, expected_elements);
  if (!p.ok()) return p.status();
  for (size_t i = 0; i < p->segments.size(); ++i) {
    if (absl::Status s = DecodeSegment<false>(p->segments[i], p->data[i], nullptr); !s.ok()) return s;
  }
  return p;
}

}  // namespace

absl::StatusOr<CodecConfig> ParseCodec(absl::string_view spec) {
  auto bad = [&](const std::string& m) { return absl::InvalidArgumentError(absl::StrCat("codec '", spec, "': ", m)); };
  std::pair<absl::string_view, absl::string_view> head = absl::StrSplit(spec, absl::MaxSplits(':', 1));
  CodecConfig c;
  const absl::string_view name = head.first;
  if (name == "dense-fp32" || name == "fp32") c.scheme = Scheme::kDenseFp32;
  else if (name == "dense-bf16" || name == "bf16") c.scheme = Scheme::kDenseBf16;
  else if (name == "quant") c.scheme = Scheme::kQuant;
  else if (name == "lloyd") c.scheme = Scheme::kLloyd;
  else if (name == "linear") c.scheme = Scheme::kLinear;
  else if (name == "topk") c.scheme = Scheme::kTopK;
  else if (name == "sign") c.scheme = Scheme::kSign;
  else return bad("unknown codec (known: dense-fp32, dense-bf16, quant, lloyd, linear, topk, sign)");
  if (c.scheme == Scheme::kSign) c.bits = 1;
  if (!head.second.empty()) {
    for (absl::string_view kv : absl::StrSplit(head.second, ',')) {
      std::pair<absl::string_view, absl::string_view> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      uint32_t v = 0;
      if (p.first == "vectors") {
        if (p.second != "dense" && p.second != "same") return bad("vectors must be dense or same");
        c.dense_vectors = p.second == "dense";
        continue;
      }
      if (p.first == "ratio") {
        if (!absl::SimpleAtod(p.second, &c.ratio) || !(c.ratio > 0 && c.ratio <= 1)) return bad("ratio must be in (0, 1]");
        continue;
      }
      if (!absl::SimpleAtoi(p.second, &v)) return bad(absl::StrCat("'", kv, "' is not key=unsigned"));
      if (p.first == "bits") c.bits = static_cast<int>(v);
      else if (p.first == "chunk") c.chunk = v;
      else if (p.first == "k") c.k = v;
      else return bad(absl::StrCat("unknown key '", p.first, "' (known: bits, chunk, k, ratio, vectors)"));
    }
  }
  if (c.scheme == Scheme::kSign && c.bits != 1) return bad("sign codes are 1 bit");
  // Validate by planning a one-chunk matrix with these settings.
  std::vector<Segment> probe = PlanSegments({TensorShape{1, c.chunk ? c.chunk : 1, false}}, c);
  if (absl::Status s = CheckSegment(probe[0]); !s.ok()) return bad(std::string(s.message()));
  return c;
}

std::string CodecName(const CodecConfig& c) {
  std::string out = Name(c.scheme);
  switch (c.scheme) {
    case Scheme::kDenseFp32:
    case Scheme::kDenseBf16: break;
    case Scheme::kQuant:
    case Scheme::kLloyd:
    case Scheme::kLinear: absl::StrAppend(&out, ":bits=", c.bits, ",chunk=", c.chunk); break;
    case Scheme::kTopK:
      if (c.ratio > 0) absl::StrAppend(&out, ":ratio=", c.ratio, ",bits=", c.bits);
      else absl::StrAppend(&out, ":chunk=", c.chunk, ",k=", c.k, ",bits=", c.bits);
      break;
    case Scheme::kSign: absl::StrAppend(&out, ":chunk=", c.chunk); break;
  }
  if (!c.dense_vectors && c.scheme != Scheme::kDenseFp32) absl::StrAppend(&out, out.find(':') == std::string::npos ? ":" : ",", "vectors=same");
  return out;
}

std::vector<Segment> PlanSegments(const std::vector<TensorShape>& tensors, const CodecConfig& c) {
  std::vector<Segment> out;
  for (const TensorShape& t : tensors) {
    Segment s;
    s.rows = t.rows;
    s.numel = t.numel;
    const Scheme scheme = (t.vector && c.dense_vectors) ? Scheme::kDenseFp32 : c.scheme;
    s.scheme = scheme;
    switch (scheme) {
      case Scheme::kDenseFp32: s.bits = 32; break;
      case Scheme::kDenseBf16: s.bits = 16; break;
      case Scheme::kQuant:
      case Scheme::kLloyd:
      case Scheme::kLinear: s.bits = c.bits; s.chunk = c.chunk; break;
      case Scheme::kTopK:
        s.bits = c.bits;
        s.chunk = c.chunk;
        s.k = c.k;
        if (c.ratio > 0) {  // one chunk over the whole tensor (capped at 2^24 elements)
          s.chunk = 2;
          while (s.chunk < t.numel && s.chunk < kMaxChunk) s.chunk *= 2;
          s.k = static_cast<uint32_t>(std::clamp<double>(std::floor(t.numel * c.ratio), 1.0, s.chunk));
        }
        break;
      case Scheme::kSign: s.bits = 1; s.chunk = c.chunk; break;
    }
    out.push_back(s);
  }
  return out;
}

std::vector<Segment> DenseSegments(uint64_t n) {
  Segment s;
  s.numel = n;
  return {s};
}

uint64_t SegmentDataBytes(const Segment& s) {
  const uint64_t n = s.numel, nc = NumChunks(s);
  switch (s.scheme) {
    case Scheme::kDenseFp32: return n * 4;
    case Scheme::kDenseBf16: return n * 2;
    case Scheme::kQuant:
    case Scheme::kLloyd: return nc * kernels::NumBins(s.bits) * 4 + kernels::PackedBytes(n, s.bits);
    case Scheme::kLinear: return nc * 8 + kernels::PackedBytes(n, s.bits);
    case Scheme::kTopK: {
      const uint64_t total = TotalK(s);
      const uint64_t values = s.bits == 32 ? total * 4 : kernels::NumBins(s.bits) * 4 + kernels::PackedBytes(total, s.bits);
      return kernels::PackedBytes(total, Log2(s.chunk)) + values;
    }
    case Scheme::kSign: return nc * 4 + kernels::PackedBytes(n, 1);
  }
  return 0;
}

uint64_t PayloadBytes(const std::vector<Segment>& segments) {
  uint64_t bytes = kPayloadHeaderBytes + segments.size() * kSegmentEntryBytes;
  for (const Segment& s : segments) bytes += SegmentDataBytes(s);
  return bytes;
}

std::string SizeNote(uint64_t bytes, uint64_t payloads, uint64_t n) {
  if (bytes == 0 || payloads == 0 || n == 0) return "nothing sent";
  const double dense = static_cast<double>(PayloadBytes(DenseSegments(n))) * payloads;
  return absl::StrFormat("%.1fx smaller than dense fp32, %.3f bits/param", dense / bytes,
                         8.0 * bytes / (static_cast<double>(payloads) * n));
}

std::string Compress(const std::vector<Segment>& segments, const float* delta, float beta, float* ef,
                     uint64_t tie_seed, int threads) {
  std::string out(PayloadBytes(segments), '\0');
  char* h = out.data();
  std::vector<uint64_t> elements_at{0}, data_at{kPayloadHeaderBytes + segments.size() * kSegmentEntryBytes};
  for (const Segment& s : segments) {
    elements_at.push_back(elements_at.back() + s.numel);
    data_at.push_back(data_at.back() + SegmentDataBytes(s));
  }
  const uint64_t elements = elements_at.back();
  ParallelUnits(elements_at, threads, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      const uint64_t at = elements_at[i];
      CompressSegment(segments[i], delta ? delta + at : nullptr, beta, ef + at, h + data_at[i], tie_seed + at);
    }
  });
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    char* e = h + kPayloadHeaderBytes + i * kSegmentEntryBytes;
    Store<uint8_t>(e, static_cast<uint8_t>(s.scheme));
    Store<uint8_t>(e + 1, static_cast<uint8_t>(s.bits));
    Store<uint32_t>(e + 4, s.chunk);
    Store<uint32_t>(e + 8, s.k);
    Store<uint32_t>(e + 12, s.rows);
    Store<uint64_t>(e + 16, s.numel);
    Store<uint64_t>(e + 24, SegmentDataBytes(s));
  }
  std::memcpy(h, kMagic, 4);
  Store<uint8_t>(h + 4, kPayloadVersion);
  Store<uint16_t>(h + 6, static_cast<uint16_t>(segments.size()));
  Store<uint64_t>(h + 8, elements);
  Store<uint64_t>(h + 16, out.size() - kPayloadHeaderBytes);
  Store<uint64_t>(h + 24, Checksum64(h + kPayloadHeaderBytes, out.size() - kPayloadHeaderBytes, kBodySeed));
  return out;
}

std::string Encode(const std::vector<Segment>& segments, const float* x) {
  uint64_t n = 0;
  for (const Segment& s : segments) n += s.numel;
  std::vector<float> scratch(x, x + n);
  return Compress(segments, nullptr, 1.0f, scratch.data());
}

absl::Status DecodeAccumulate(absl::string_view payload, size_t expected_elements, float* sum) {
  absl::StatusOr<Parsed> p = ParseChecked(payload, expected_elements);
  if (!p.ok()) return p.status();
  uint64_t off = 0;
  for (size_t i = 0; i < p->segments.size(); ++i) {
    DecodeSegment<true>(p->segments[i], p->data[i], sum + off).IgnoreError();  // validated above
    off += p->segments[i].numel;
  }
  return absl::OkStatus();
}

absl::StatusOr<double> DecodedNorm(absl::string_view payload, size_t expected_elements) {
  absl::StatusOr<Parsed> p = ParseChecked(payload, expected_elements);
  if (!p.ok()) return p.status();
  uint64_t largest = 0;
  for (const Segment& seg : p->segments) largest = std::max(largest, seg.numel);
  std::vector<float> values(largest);
  double sq = 0;
  for (size_t i = 0; i < p->segments.size(); ++i) {
    const uint64_t n = p->segments[i].numel;
    std::fill(values.begin(), values.begin() + n, 0.0f);
    DecodeSegment<true>(p->segments[i], p->data[i], values.data()).IgnoreError();  // validated above
    for (uint64_t j = 0; j < n; ++j) sq += static_cast<double>(values[j]) * values[j];
  }
  return std::sqrt(sq);
}

void SumPayloads(const std::vector<WeightedPayload>& payloads, size_t expected_elements, float* sum, int threads) {
  std::vector<Parsed> parsed;
  for (const WeightedPayload& w : payloads) parsed.push_back(*Parse(w.payload, expected_elements));  // validated
  if (parsed.empty()) return;
  // Work units: segment i of every payload, when all payloads share one segment table;
  // otherwise one unit, the whole payloads (a run whose codec is not fixed).
  bool aligned = true;
  for (const Parsed& q : parsed) {
    aligned = aligned && q.segments.size() == parsed[0].segments.size();
    for (size_t i = 0; aligned && i < q.segments.size(); ++i) aligned = q.segments[i].numel == parsed[0].segments[i].numel;
  }
  const size_t units = aligned ? parsed[0].segments.size() : 1;
  std::vector<uint64_t> offset(units + 1, 0);
  for (size_t i = 0; i < units; ++i) offset[i + 1] = offset[i] + (aligned ? parsed[0].segments[i].numel : expected_elements);
  // Units [first, last): every payload's segments there, payloads in order, scaled ones
  // through a zeroed buffer: each element sees the same additions in the same order as
  // decoding the payloads one after another would make.
  auto run = [&](size_t first, size_t last) {
    std::vector<float> values;
    for (size_t k = 0; k < payloads.size(); ++k) {
      const Parsed& q = parsed[k];
      const size_t segs_first = aligned ? first : 0, segs_last = aligned ? last : q.segments.size();
      uint64_t off = aligned ? offset[first] : 0;
      for (size_t i = segs_first; i < segs_last; ++i) {
        const Segment& seg = q.segments[i];
        if (payloads[k].scale == 1.0f) {
          DecodeSegment<true>(seg, q.data[i], sum + off).IgnoreError();
        } else {
          values.assign(seg.numel, 0.0f);
          DecodeSegment<true>(seg, q.data[i], values.data()).IgnoreError();
          for (uint64_t j = 0; j < seg.numel; ++j) sum[off + j] += payloads[k].scale * values[j];
        }
        off += seg.numel;
      }
    }
  };
  ParallelUnits(offset, threads, run);
}

absl::Status CheckPlan(absl::string_view payload, const std::vector<Segment>& plan) {
  uint64_t elements = 0;
  for (const Segment& s : plan) elements += s.numel;
  absl::StatusOr<Parsed> p = Parse(payload, elements);
  if (!p.ok()) return p.status();
  if (p->segments.size() != plan.size()) {
    return Bad(absl::StrCat(p->segments.size(), " segments; this run's codec has ", plan.size()));
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    const Segment &a = p->segments[i], &b = plan[i];
    if (a.scheme != b.scheme || a.bits != b.bits || a.chunk != b.chunk || a.k != b.k || a.rows != b.rows ||
        a.numel != b.numel) {
      return Bad(absl::StrCat("segment ", i, " is ", Name(a.scheme), " bits ", a.bits, " chunk ", a.chunk,
                              "; this run's codec wants ", Name(b.scheme), " bits ", b.bits, " chunk ", b.chunk));
    }
  }
  return absl::OkStatus();
}

absl::Status VoteAccumulate(absl::string_view payload, size_t expected_elements, int32_t* counts) {
  absl::StatusOr<Parsed> p = Parse(payload, expected_elements);
  if (!p.ok()) return p.status();
  for (size_t i = 0; i < p->segments.size(); ++i) {
    if (p->segments[i].scheme != Scheme::kSign) return Bad(absl::StrCat("vote payloads hold sign segments only; segment ", i, " is ", Name(p->segments[i].scheme)));
    if (absl::Status s = DecodeSegment<false>(p->segments[i], p->data[i], nullptr); !s.ok()) return s;
  }
  uint64_t off = 0;
  for (size_t i = 0; i < p->segments.size(); ++i) {
    const Segment& s = p->segments[i];
    kc::VoteAccumulate(reinterpret_cast<const uint8_t*>(p->data[i] + NumChunks(s) * 4), s.numel, counts + off);
    off += s.numel;
  }
  return absl::OkStatus();
}

}  // namespace muloco
