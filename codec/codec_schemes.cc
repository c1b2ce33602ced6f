// The table of codec schemes (codec_schemes.h): for each, its checks, size, plan, encoder
// (a sequence of CodecBackend calls, the same on the CPU and CUDA) and host decoder.
#include "codec/codec_schemes.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/bf16.h"
#include "kernels/bitpack.h"
#include "kernels/quantize.h"
#include "kernels/sign.h"
#include "kernels/subset.h"
#include "kernels/topk.h"

namespace muloco::codec_internal {
namespace {

namespace kc = kernels::cpu;

#define MULOCO_TRY(expr)                      \
  do {                                        \
    if (absl::Status st_ = (expr); !st_.ok()) \
      return st_;                             \
  } while (0)

// Scratch slots of the encoders (CodecBackend::Scratch).
enum Slot { kMetaSlot, kCodesSlot, kPackedSlot, kIdxSlot, kValsSlot, kIdxPackedSlot, kDecodedSlot };

template <typename T>
absl::StatusOr<T*> Scratch(CodecBackend& b, Slot slot, uint64_t count) {
  absl::StatusOr<void*> p = b.Scratch(slot, std::max<uint64_t>(count, 1) * sizeof(T));
  if (!p.ok()) return p.status();
  return static_cast<T*>(*p);
}
#define MULOCO_SCRATCH(var, T, slot, count)                      \
  absl::StatusOr<T*> var##_or = Scratch<T>(b, slot, count);      \
  if (!var##_or.ok()) return var##_or.status();                  \
  T* var = *var##_or

bool IsPow2(uint32_t v) { return v >= 2 && (v & (v - 1)) == 0; }
int Log2(uint32_t v) { return 31 - __builtin_clz(v); }
uint64_t ChunkLen(const Segment& s, uint64_t c) { return std::min<uint64_t>(s.chunk, s.numel - c * s.chunk); }
uint64_t TotalK(const Segment& s) { return (s.numel / s.chunk) * s.k + std::min<uint64_t>(s.k, s.numel % s.chunk); }
bool ChunkedOk(const Segment& s) { return s.chunk >= 8 && s.chunk <= kMaxChunk && s.chunk % 8 == 0; }

// Elements a chunked encoder takes at a time: on the host, whole chunks adding up to about
// 32K elements, so that a span stays in cache from the error-feedback update to the
// residual; on a device, the whole segment.
uint64_t SpanOf(const CodecBackend& b, const Segment& s) {
  if (!b.OnHost()) return std::max<uint64_t>(s.numel, 1);
  return std::max<uint64_t>(1, (uint64_t{1} << 15) / s.chunk) * s.chunk;
}

// Finite and within kMaxAbsValue (a NaN fails the comparison too).
bool InRange(float v) { return std::fabs(v) <= kMaxAbsValue; }
bool AllInRange(const char* p, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i)
    if (!InRange(Load<float>(p + 4 * i))) return false;
  return true;
}
absl::Status RangeError(const char* what) { return Bad(absl::StrCat(what, " non-finite or beyond the limit")); }

// --- dense fp32 / bf16 ---------------------------------------------------------------------

absl::Status CheckDense(const Segment& s, int bits) {
  if (s.bits != bits || s.chunk || s.k) return BadSegment(s, absl::StrCat("needs bits ", bits, ", no chunk, no k"));
  return absl::OkStatus();
}

absl::Status EncodeFp32(CodecBackend& b, const Segment& s, const float* delta, float beta, float* e, char* out,
                        size_t at, uint64_t) {
  if (delta) MULOCO_TRY(b.EfUpdate(e, delta, s.numel, beta));
  MULOCO_TRY(b.Emit(out, at, e, s.numel * 4));
  return b.Zero(e, s.numel);  // e - e
}
absl::Status DecodeFp32(const Segment& s, const char* d, float* sum) {
  if (!sum) return AllInRange(d, s.numel) ? absl::OkStatus() : RangeError("value");
  for (uint64_t i = 0; i < s.numel; ++i) sum[i] += Load<float>(d + 4 * i);
  return absl::OkStatus();
}

absl::Status EncodeBf16(CodecBackend& b, const Segment& s, const float* delta, float beta, float* e, char* out,
                        size_t at, uint64_t) {
  MULOCO_SCRATCH(half, uint16_t, kPackedSlot, s.numel);
  if (delta) MULOCO_TRY(b.EfUpdate(e, delta, s.numel, beta));
  MULOCO_TRY(b.Bf16Encode(e, s.numel, half));
  return b.Emit(out, at, half, s.numel * 2);
}
absl::Status DecodeBf16(const Segment& s, const char* d, float* sum) {
  thread_local std::vector<uint16_t> h;
  h.resize(s.numel);
  if (s.numel) std::memcpy(h.data(), d, s.numel * 2);
  if (sum) {
    kc::Bf16Accumulate(h.data(), s.numel, sum);
    return absl::OkStatus();
  }
  for (uint16_t v : h) {
    const uint32_t u = kernels::Bf16ToBits(v);
    if (!InRange(Load<float>(reinterpret_cast<const char*>(&u)))) return RangeError("bf16 value");
  }
  return absl::OkStatus();
}

// --- chunked quantizers: quant (statistical), lloyd (Gaussian), linear (min/max) -------------

Quantizer QuantizerOf(Scheme s) {
  return s == Scheme::kQuant ? Quantizer::kStat : s == Scheme::kLloyd ? Quantizer::kGaussian : Quantizer::kLinear;
}
uint64_t MetaFloats(const Segment& s) {
  return NumChunks(s) * (s.scheme == Scheme::kLinear ? 2 : kernels::NumBins(s.bits));
}

absl::Status CheckQuant(const Segment& s) {
  if (s.scheme == Scheme::kLloyd && !kernels::ValidGaussianBits(s.bits)) {
    return BadSegment(s, absl::StrCat("bits ", s.bits, " not in {1,2,4}"));
  }
  if (!kernels::ValidCodeBits(s.bits)) return BadSegment(s, absl::StrCat("bits ", s.bits, " not in {1,2,4,8}"));
  if (!ChunkedOk(s)) return BadSegment(s, "chunk must be a multiple of 8 in [8, 2^24]");
  if (s.k && (s.k % 8 || s.k >= s.chunk)) return BadSegment(s, "k (kept per chunk) must be a multiple of 8 below chunk");
  return absl::OkStatus();
}
// A `keep` segment's kept elements as a segment of their own: chunks of k, packed in order.
Segment Kept(const Segment& s) {
  Segment v = s;
  v.chunk = s.k;
  v.k = 0;
  v.rows = 1;
  v.numel = TotalK(s);
  return v;
}
uint64_t QuantBytes(const Segment& s) {
  if (s.k) return 4 + QuantBytes(Kept(s));
  return MetaFloats(s) * 4 + kernels::PackedBytes(s.numel, s.bits);
}

absl::Status EncodeQuant(CodecBackend& b, const Segment& s, const float* delta, float beta, float* e, char* out,
                         size_t at, uint64_t seed);

// keep: e <- beta * e + delta; the subset's values gathered and encoded as a segment of
// their own; the subset's residuals put back into e (zeroed first: x + -x is exactly 0).
absl::Status EncodeKept(CodecBackend& b, const Segment& s, const float* delta, float beta, float* e, char* out,
                        size_t at, uint64_t seed) {
  const Segment v = Kept(s);
  const uint32_t subset_seed = static_cast<uint32_t>(kernels::SplitMix64(seed ^ kernels::SplitMix64(at)));
  MULOCO_SCRATCH(idx, uint32_t, kIdxSlot, v.numel);
  MULOCO_SCRATCH(vals, float, kValsSlot, v.numel);
  MULOCO_SCRATCH(orig, float, kDecodedSlot, v.numel);
  if (delta) MULOCO_TRY(b.EfUpdate(e, delta, s.numel, beta));
  MULOCO_TRY(b.Subset(subset_seed, s.numel, s.chunk, s.k, idx));
  MULOCO_TRY(b.Gather(e, s.numel, s.chunk, s.k, idx, vals));
  MULOCO_TRY(b.Gather(e, s.numel, s.chunk, s.k, idx, orig));
  MULOCO_TRY(b.EmitHost(out, at, &subset_seed, 4));
  MULOCO_TRY(EncodeQuant(b, v, nullptr, 1.0f, vals, out, at + 4, seed));  // vals: the residuals
  MULOCO_TRY(b.Scatter(orig, s.numel, s.chunk, s.k, idx, -1.0f, e));
  return b.Scatter(vals, s.numel, s.chunk, s.k, idx, 1.0f, e);
}

absl::Status EncodeQuant(CodecBackend& b, const Segment& s, const float* delta, float beta, float* e, char* out,
                         size_t at, uint64_t seed) {
  if (s.k) return EncodeKept(b, s, delta, beta, e, out, at, seed);
  const Quantizer q = QuantizerOf(s.scheme);
  const uint64_t per = s.scheme == Scheme::kLinear ? 2 : kernels::NumBins(s.bits), span = SpanOf(b, s);
  const size_t code_at = at + MetaFloats(s) * 4;
  MULOCO_SCRATCH(meta, float, kMetaSlot, per * (span / s.chunk + 1));
  MULOCO_SCRATCH(codes, uint8_t, kCodesSlot, span);
  MULOCO_SCRATCH(bits, uint8_t, kPackedSlot, kernels::PackedBytes(span, s.bits));
  for (uint64_t off = 0; off < s.numel; off += span) {  // whole chunks at a time
    const uint64_t len = std::min(span, s.numel - off), nc = (len + s.chunk - 1) / s.chunk;
    if (delta) MULOCO_TRY(b.EfUpdate(e + off, delta + off, len, beta));
    MULOCO_TRY(b.Quantize(q, e + off, len, s.chunk, s.bits, meta, codes));
    MULOCO_TRY(b.PackCodes(codes, len, s.bits, bits));
    MULOCO_TRY(b.Emit(out, at + off / s.chunk * per * 4, meta, nc * per * 4));
    MULOCO_TRY(b.Emit(out, code_at + off * s.bits / 8, bits, kernels::PackedBytes(len, s.bits)));
    MULOCO_TRY(b.Dequantize(q, meta, codes, len, s.chunk, s.bits, -1.0f, e + off));  // e -= decoded
  }
  return absl::OkStatus();
}
absl::Status DecodeQuant(const Segment& s, const char* d, float* sum);

absl::Status DecodeKept(const Segment& s, const char* d, float* sum) {
  const Segment v = Kept(s);
  if (!sum) return DecodeQuant(v, d + 4, nullptr);
  thread_local std::vector<float> vals;
  thread_local std::vector<uint32_t> idx;
  vals.assign(v.numel, 0.0f);
  idx.resize(v.numel);
  MULOCO_TRY(DecodeQuant(v, d + 4, vals.data()));
  kc::SubsetChunks(Load<uint32_t>(d), s.numel, s.chunk, s.k, idx.data());
  kc::ScatterAccumulateChunks(vals.data(), s.numel, s.chunk, s.k, idx.data(), 1.0f, sum);
  return absl::OkStatus();
}

absl::Status DecodeQuant(const Segment& s, const char* d, float* sum) {
  if (s.k) return DecodeKept(s, d, sum);
  const int nbins = kernels::NumBins(s.bits);
  const bool linear = s.scheme == Scheme::kLinear;
  const uint64_t per = linear ? 2 : nbins;
  const char* code_base = d + MetaFloats(s) * 4;
  thread_local std::vector<uint8_t> codes;
  float lut[256];
  for (uint64_t c = 0; c < NumChunks(s); ++c) {
    const char* m = d + c * per * 4;
    if (linear) {
      kernels::LinearTable(Load<float>(m), Load<float>(m + 4), s.bits, lut);
    } else {
      std::memcpy(lut, m, nbins * 4);
    }
    if (!sum) {
      if (!AllInRange(reinterpret_cast<const char*>(lut), nbins) || (linear && !AllInRange(m, 2))) {
        return RangeError("decode table");
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

// --- top-k: per chunk the k largest |x|, indices packed, values fp32 or one 2^bits table ----

absl::Status CheckTopK(const Segment& s) {
  if (!kernels::ValidCodeBits(s.bits) && s.bits != 32) return BadSegment(s, absl::StrCat("bits ", s.bits, " not in {1,2,4,8,32}"));
  if (!IsPow2(s.chunk) || s.chunk > kMaxChunk) return BadSegment(s, "chunk must be a power of two in [2, 2^24]");
  if (s.k < 1 || s.k > s.chunk) return BadSegment(s, "k must be in [1, chunk]");
  return absl::OkStatus();
}
uint64_t TopKBytes(const Segment& s) {
  const uint64_t total = TotalK(s);
  const uint64_t values = s.bits == 32 ? total * 4 : kernels::NumBins(s.bits) * 4 + kernels::PackedBytes(total, s.bits);
  return kernels::PackedBytes(total, Log2(s.chunk)) + values;
}

absl::Status EncodeTopK(CodecBackend& b, const Segment& s, const float* delta, float beta, float* e, char* out,
                        size_t at, uint64_t) {
  const uint64_t n = s.numel, total = TotalK(s), idx_bytes = kernels::PackedBytes(total, Log2(s.chunk));
  if (!b.SupportsTopKChunk(s.chunk)) {
    return absl::UnimplementedError(absl::StrCat(b.Name(), " backend: no top-k over chunks of ", s.chunk));
  }
  MULOCO_SCRATCH(idx, uint32_t, kIdxSlot, total);
  MULOCO_SCRATCH(vals, float, kValsSlot, total);
  MULOCO_SCRATCH(idx_packed, uint8_t, kIdxPackedSlot, idx_bytes);
  if (delta) MULOCO_TRY(b.EfUpdate(e, delta, n, beta));
  MULOCO_TRY(b.TopK(e, n, s.chunk, s.k, idx));
  MULOCO_TRY(b.Gather(e, n, s.chunk, s.k, idx, vals));
  MULOCO_TRY(b.PackIndices(idx, total, Log2(s.chunk), idx_packed));
  if (s.bits == 32) {
    MULOCO_TRY(b.Emit(out, at, idx_packed, idx_bytes));
    MULOCO_TRY(b.Emit(out, at + idx_bytes, vals, total * 4));
    return b.Scatter(vals, n, s.chunk, s.k, idx, -1.0f, e);  // e -= kept values
  }
  const uint64_t nbins = kernels::NumBins(s.bits), packed = kernels::PackedBytes(total, s.bits);
  MULOCO_SCRATCH(lut, float, kMetaSlot, nbins);
  MULOCO_SCRATCH(codes, uint8_t, kCodesSlot, total);
  MULOCO_SCRATCH(bits, uint8_t, kPackedSlot, packed);
  MULOCO_SCRATCH(decoded, float, kDecodedSlot, total);
  // One statistical table for all kept values of the segment (all zeros when none is kept,
  // as the quantizer's flat case gives).
  MULOCO_TRY(total ? b.Quantize(Quantizer::kStat, vals, total, total, s.bits, lut, codes) : b.Zero(lut, nbins));
  MULOCO_TRY(b.PackCodes(codes, total, s.bits, bits));
  MULOCO_TRY(b.Emit(out, at, lut, nbins * 4));
  MULOCO_TRY(b.Emit(out, at + nbins * 4, idx_packed, idx_bytes));
  MULOCO_TRY(b.Emit(out, at + nbins * 4 + idx_bytes, bits, packed));
  MULOCO_TRY(b.Lookup(lut, codes, total, decoded));
  return b.Scatter(decoded, n, s.chunk, s.k, idx, -1.0f, e);  // e -= decoded values
}
absl::Status DecodeTopK(const Segment& s, const char* d, float* sum) {
  const uint64_t total = TotalK(s);
  const int nbins = s.bits <= 8 ? kernels::NumBins(s.bits) : 0;
  const char* p = d;
  float lut[256];
  if (s.bits < 32) {
    std::memcpy(lut, p, nbins * 4);
    if (!AllInRange(p, nbins)) return RangeError("topk value table");
    p += nbins * 4;
  }
  thread_local std::vector<uint32_t> idx;
  thread_local std::vector<uint8_t> codes;
  idx.resize(total);
  kc::UnpackIndices(reinterpret_cast<const uint8_t*>(p), total, Log2(s.chunk), idx.data());
  p += kernels::PackedBytes(total, Log2(s.chunk));
  if (!sum) {
    if (s.bits == 32 && !AllInRange(p, total)) return RangeError("topk value");
    for (uint64_t c = 0, t = 0; c < NumChunks(s); ++c) {
      const uint64_t len = ChunkLen(s, c), k = std::min<uint64_t>(s.k, len);
      for (uint64_t j = 0; j < k; ++j, ++t) {
        if (idx[t] >= len) return Bad(absl::StrCat("topk index ", idx[t], " out of range in chunk ", c));
        if (j > 0 && idx[t] <= idx[t - 1]) return Bad(absl::StrCat("topk indices not ascending in chunk ", c));
      }
    }
    return absl::OkStatus();
  }
  thread_local std::vector<float> vals;
  vals.resize(total);
  if (s.bits == 32) {
    if (total) std::memcpy(vals.data(), p, total * 4);
  } else {
    codes.resize(total);
    kc::UnpackCodes(reinterpret_cast<const uint8_t*>(p), total, s.bits, codes.data());
    for (uint64_t t = 0; t < total; ++t) vals[t] = lut[codes[t]];
  }
  kc::ScatterAccumulateChunks(vals.data(), s.numel, s.chunk, s.k, idx.data(), 1.0f, sum);
  return absl::OkStatus();
}

// --- sign: a mean-|x| scale per chunk, one bit per element --------------------------------

absl::Status CheckSign(const Segment& s) {
  if (s.bits != 1 || !ChunkedOk(s) || s.k) return BadSegment(s, "needs bits 1, chunk a multiple of 8 in [8, 2^24], no k");
  return absl::OkStatus();
}
uint64_t SignBytes(const Segment& s) { return NumChunks(s) * 4 + kernels::PackedBytes(s.numel, 1); }

absl::Status EncodeSign(CodecBackend& b, const Segment& s, const float* delta, float beta, float* e, char* out,
                        size_t at, uint64_t tie_seed) {
  const uint64_t span = SpanOf(b, s);
  const size_t bits_at = at + NumChunks(s) * 4;
  MULOCO_SCRATCH(scales, float, kMetaSlot, span / s.chunk + 1);
  MULOCO_SCRATCH(bits, uint8_t, kPackedSlot, kernels::PackedBytes(span, 1));
  for (uint64_t off = 0; off < s.numel; off += span) {  // whole chunks at a time
    const uint64_t len = std::min(span, s.numel - off), nc = (len + s.chunk - 1) / s.chunk;
    if (delta) MULOCO_TRY(b.EfUpdate(e + off, delta + off, len, beta));
    MULOCO_TRY(b.MeanAbs(e + off, len, s.chunk, scales));
    MULOCO_TRY(b.SignPack(e + off, len, tie_seed + off, bits));
    MULOCO_TRY(b.Emit(out, at + off / s.chunk * 4, scales, nc * 4));
    MULOCO_TRY(b.Emit(out, bits_at + off / 8, bits, kernels::PackedBytes(len, 1)));
    MULOCO_TRY(b.SignAccumulate(bits, scales, len, s.chunk, -1.0f, e + off));  // e -= decoded
  }
  return absl::OkStatus();
}

absl::Status DecodeSign(const Segment& s, const char* d, float* sum) {
  const char* bits = d + NumChunks(s) * 4;
  for (uint64_t c = 0; c < NumChunks(s); ++c) {
    const float scale = Load<float>(d + c * 4);
    if (!sum) {
      if (!InRange(scale) || scale < 0) return Bad("sign scale must be in [0, limit]");
      continue;
    }
    const uint64_t off = c * s.chunk;
    kc::SignAccumulate(reinterpret_cast<const uint8_t*>(bits + off / 8), ChunkLen(s, c), scale, sum + off);
  }
  return absl::OkStatus();
}

// --- plans and specs ------------------------------------------------------------------------

void PlanDense(int bits, Segment& s) {
  s.bits = bits;
  s.chunk = 0;
  s.k = 0;
}
void PlanChunked(const CodecConfig& c, Segment& s) {
  s.bits = c.scheme == Scheme::kSign ? 1 : c.bits;
  s.chunk = c.chunk;
}
void PlanQuant(const CodecConfig& c, Segment& s) {
  PlanChunked(c, s);
  const uint64_t k = std::max<uint64_t>(8, static_cast<uint64_t>(std::floor(c.keep * c.chunk / 8)) * 8);
  s.k = c.keep > 0 && k < c.chunk ? static_cast<uint32_t>(k) : 0;  // k >= chunk: every element
}
void PlanTopK(const CodecConfig& c, Segment& s) {
  s.bits = c.bits;
  s.chunk = c.chunk;
  s.k = c.k;
  if (c.ratio > 0) {  // one chunk over the whole tensor (capped at 2^24 elements)
    s.chunk = 2;
    while (s.chunk < s.numel && s.chunk < kMaxChunk) s.chunk *= 2;
    s.k = static_cast<uint32_t>(std::clamp<double>(std::floor(s.numel * c.ratio), 1.0, s.chunk));
  }
}
std::string NoKeys(const CodecConfig&) { return ""; }
std::string BitsChunk(const CodecConfig& c) {
  return absl::StrCat("bits=", c.bits, ",chunk=", c.chunk, c.keep > 0 ? absl::StrCat(",keep=", c.keep) : "");
}
std::string TopKKeys(const CodecConfig& c) {
  if (c.ratio > 0) return absl::StrCat("ratio=", c.ratio, ",bits=", c.bits);
  return absl::StrCat("chunk=", c.chunk, ",k=", c.k, ",bits=", c.bits);
}

const SchemeOps kSchemes[] = {
    {Scheme::kDenseFp32, "dense-fp32", [](const Segment& s) { return CheckDense(s, 32); },
     [](const Segment& s) { return s.numel * 4; }, [](const CodecConfig&, Segment& s) { PlanDense(32, s); }, NoKeys,
     EncodeFp32, DecodeFp32},
    {Scheme::kDenseBf16, "dense-bf16", [](const Segment& s) { return CheckDense(s, 16); },
     [](const Segment& s) { return s.numel * 2; }, [](const CodecConfig&, Segment& s) { PlanDense(16, s); }, NoKeys,
     EncodeBf16, DecodeBf16},
    {Scheme::kQuant, "quant", CheckQuant, QuantBytes, PlanQuant, BitsChunk, EncodeQuant, DecodeQuant},
    {Scheme::kLloyd, "lloyd", CheckQuant, QuantBytes, PlanQuant, BitsChunk, EncodeQuant, DecodeQuant},
    {Scheme::kLinear, "linear", CheckQuant, QuantBytes, PlanQuant, BitsChunk, EncodeQuant, DecodeQuant},
    {Scheme::kTopK, "topk", CheckTopK, TopKBytes, PlanTopK, TopKKeys, EncodeTopK, DecodeTopK},
    {Scheme::kSign, "sign", CheckSign, SignBytes, PlanChunked,
     [](const CodecConfig& c) { return absl::StrCat("chunk=", c.chunk); }, EncodeSign, DecodeSign},
};

}  // namespace

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError("payload: " + m); }

absl::Status BadSegment(const Segment& s, const std::string& m) {
  return Bad(absl::StrCat(FindScheme(s.scheme)->name, " segment: ", m));
}

const SchemeOps* FindScheme(Scheme scheme) {
  for (const SchemeOps& s : kSchemes)
    if (s.scheme == scheme) return &s;
  return nullptr;
}

const SchemeOps* FindScheme(const std::string& name) {
  const std::string full = name == "fp32" ? "dense-fp32" : name == "bf16" ? "dense-bf16" : name;
  for (const SchemeOps& s : kSchemes)
    if (full == s.name) return &s;
  return nullptr;
}

std::string SchemeNames() {
  std::string out;
  for (const SchemeOps& s : kSchemes) absl::StrAppend(&out, out.empty() ? "" : ", ", s.name);
  return out;
}

}  // namespace muloco::codec_internal
