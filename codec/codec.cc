// Payload framing (header, segment table, checksum), planning and the public codec API (see
// codec.h); each scheme's own code is in its table entry (codec_schemes.cc).
#include "codec/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "codec/checksum.h"
#include "codec/codec_schemes.h"
#include "codec/parallel.h"
#include "kernels/sign.h"

namespace muloco {
namespace {

using codec_internal::Bad;
using codec_internal::FindScheme;
using codec_internal::Load;
using codec_internal::SchemeOps;
using codec_internal::Store;
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "payloads are little-endian");
constexpr char kMagic[4] = {'M', 'L', 'C', 'P'};
constexpr uint64_t kBodySeed = 0x626f6479ULL;
constexpr uint64_t kMaxNumel = uint64_t{1} << 40;

const char* Name(Scheme s) {
  const SchemeOps* ops = FindScheme(s);
  return ops ? ops->name : "unknown";
}

// Checks a segment's parameters (from a peer or a config) before any size is computed.
absl::Status CheckSegment(const Segment& s) {
  const SchemeOps* ops = FindScheme(s.scheme);
  if (!ops) return Bad(absl::StrCat("unknown scheme ", static_cast<int>(s.scheme)));
  if (s.numel > kMaxNumel) return codec_internal::BadSegment(s, "too many elements");
  if (s.rows < 1 || s.numel % s.rows != 0) return codec_internal::BadSegment(s, "rows do not divide the element count");
  return ops->check(s);
}

// Validates (sum null) or decodes-accumulates one segment's data (codec_schemes.h).
absl::Status Decode(const Segment& s, const char* d, float* sum) { return FindScheme(s.scheme)->decode(s, d, sum); }

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
    if (absl::Status s = Decode(p->segments[i], p->data[i], nullptr); !s.ok()) return s;
  }
  return p;
}

}  // namespace

absl::StatusOr<CodecConfig> ParseCodec(absl::string_view spec) {
  auto bad = [&](const std::string& m) { return absl::InvalidArgumentError(absl::StrCat("codec '", spec, "': ", m)); };
  std::pair<absl::string_view, absl::string_view> head = absl::StrSplit(spec, absl::MaxSplits(':', 1));
  CodecConfig c;
  const absl::string_view name = head.first;
  const SchemeOps* ops = FindScheme(std::string(name));
  if (!ops) return bad(absl::StrCat("unknown codec (known: ", codec_internal::SchemeNames(), ")"));
  c.scheme = ops->scheme;
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
      if (p.first == "keep") {
        if (!absl::SimpleAtod(p.second, &c.keep) || !(c.keep > 0 && c.keep <= 1)) return bad("keep must be in (0, 1]");
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
      else return bad(absl::StrCat("unknown key '", p.first, "' (known: bits, chunk, k, ratio, keep, vectors)"));
    }
  }
  if (c.scheme == Scheme::kSign && c.bits != 1) return bad("sign codes are 1 bit");
  const bool quantizer = c.scheme == Scheme::kQuant || c.scheme == Scheme::kLloyd || c.scheme == Scheme::kLinear;
  if (c.keep > 0 && !quantizer) return bad("keep is for quant, lloyd and linear");
  // Validate by planning a one-chunk matrix with these settings.
  std::vector<Segment> probe = PlanSegments({TensorShape{1, c.chunk ? c.chunk : 1, false}}, c);
  if (absl::Status s = CheckSegment(probe[0]); !s.ok()) return bad(std::string(s.message()));
  return c;
}

std::string CodecName(const CodecConfig& c) {
  std::string out = Name(c.scheme);
  const SchemeOps* ops = FindScheme(c.scheme);
  const std::string keys = ops ? ops->spec(c) : "";
  if (!keys.empty()) absl::StrAppend(&out, ":", keys);
  if (!c.dense_vectors && c.scheme != Scheme::kDenseFp32) absl::StrAppend(&out, keys.empty() ? ":" : ",", "vectors=same");
  return out;
}

std::vector<Segment> PlanSegments(const std::vector<TensorShape>& tensors, const CodecConfig& c) {
  std::vector<Segment> out;
  for (const TensorShape& t : tensors) {
    Segment s;
    s.rows = t.rows;
    s.numel = t.numel;
    s.scheme = (t.vector && c.dense_vectors) ? Scheme::kDenseFp32 : c.scheme;
    FindScheme(s.scheme)->plan(c, s);
    out.push_back(s);
  }
  return out;
}

std::vector<Segment> DenseSegments(uint64_t n) {
  Segment s;
  s.numel = n;
  return {s};
}

uint64_t SegmentDataBytes(const Segment& s) { return FindScheme(s.scheme)->data_bytes(s); }

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

absl::StatusOr<std::string> Compress(CodecBackend& backend, const std::vector<Segment>& segments, const float* delta,
                                     float beta, float* ef, uint64_t tie_seed, int threads) {
  std::string out(PayloadBytes(segments), '\0');
  char* h = out.data();
  std::vector<uint64_t> elements_at{0}, data_at{kPayloadHeaderBytes + segments.size() * kSegmentEntryBytes};
  for (const Segment& s : segments) {
    elements_at.push_back(elements_at.back() + s.numel);
    data_at.push_back(data_at.back() + SegmentDataBytes(s));
  }
  const uint64_t elements = elements_at.back();
  if (absl::Status st = backend.BeginBody(h, out.size()); !st.ok()) return st;
  std::vector<absl::Status> failed(segments.size());
  ParallelUnits(elements_at, backend.OnHost() ? threads : 1, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      const uint64_t at = elements_at[i];
      const Segment& s = segments[i];
      failed[i] = FindScheme(s.scheme)->encode(backend, s, delta ? delta + at : nullptr, beta, ef + at, h, data_at[i],
                                               tie_seed + at);
      if (!failed[i].ok()) return;
    }
  });
  absl::Status ended = backend.EndBody(h);  // also on failure: nothing may still write ef afterwards
  for (const absl::Status& st : failed) {
    if (!st.ok()) return st;
  }
  if (!ended.ok()) return ended;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    char* e = h + kPayloadHeaderBytes + i * kSegmentEntryBytes;
    Store<uint8_t>(e, static_cast<uint8_t>(s.scheme));
    Store<uint8_t>(e + 1, static_cast<uint8_t>(s.bits));
    Store<uint16_t>(e + 2, 0);
    Store<uint32_t>(e + 4, s.chunk);
    Store<uint32_t>(e + 8, s.k);
    Store<uint32_t>(e + 12, s.rows);
    Store<uint64_t>(e + 16, s.numel);
    Store<uint64_t>(e + 24, SegmentDataBytes(s));
  }
  std::memcpy(h, kMagic, 4);
  Store<uint8_t>(h + 4, kPayloadVersion);
  Store<uint8_t>(h + 5, 0);
  Store<uint16_t>(h + 6, static_cast<uint16_t>(segments.size()));
  Store<uint64_t>(h + 8, elements);
  Store<uint64_t>(h + 16, out.size() - kPayloadHeaderBytes);
  Store<uint64_t>(h + 24, Checksum64(h + kPayloadHeaderBytes, out.size() - kPayloadHeaderBytes, kBodySeed));
  return out;
}

std::string Compress(const std::vector<Segment>& segments, const float* delta, float beta, float* ef,
                     uint64_t tie_seed, int threads) {
  absl::StatusOr<std::string> out = Compress(CpuBackend(), segments, delta, beta, ef, tie_seed, threads);
  if (!out.ok()) {  // the CPU backend encodes every valid plan: a failure is a bug
    std::fprintf(stderr, "codec: CPU encoding failed: %s\n", out.status().ToString().c_str());
    std::abort();
  }
  return *std::move(out);
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
    Decode(p->segments[i], p->data[i], sum + off).IgnoreError();  // validated above
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
    Decode(p->segments[i], p->data[i], values.data()).IgnoreError();  // validated above
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
          Decode(seg, q.data[i], sum + off).IgnoreError();
        } else {
          values.assign(seg.numel, 0.0f);
          Decode(seg, q.data[i], values.data()).IgnoreError();
          for (uint64_t j = 0; j < seg.numel; ++j) sum[off + j] += payloads[k].scale * values[j];
        }
        off += seg.numel;
      }
    }
  };
  ParallelUnits(offset, threads, run);
}

absl::StatusOr<PayloadSegments> PayloadSegments::Of(absl::string_view payload, size_t expected_elements) {
  absl::StatusOr<Parsed> p = Parse(payload, expected_elements);
  if (!p.ok()) return p.status();
  PayloadSegments out;
  out.segments_ = std::move(p->segments);
  out.data_ = std::move(p->data);
  out.offset_.push_back(0);
  for (const Segment& s : out.segments_) out.offset_.push_back(out.offset_.back() + s.numel);
  return out;
}

void PayloadSegments::DecodeRange(uint64_t first, uint64_t count, float* out) const {
  const uint64_t last = first + count;
  // The first segment ending after `first`, then every segment overlapping the range.
  size_t i = std::upper_bound(offset_.begin(), offset_.end(), first) - offset_.begin() - 1;
  std::vector<float> part;  // a segment straddling the range's ends, decoded whole
  for (; i < segments_.size() && offset_[i] < last; ++i) {
    const uint64_t lo = offset_[i], hi = offset_[i + 1];
    if (lo >= first && hi <= last) {
      Decode(segments_[i], data_[i], out + (lo - first)).IgnoreError();  // validated (REQUIRES)
      continue;
    }
    part.assign(segments_[i].numel, 0.0f);
    Decode(segments_[i], data_[i], part.data()).IgnoreError();
    for (uint64_t j = std::max(lo, first); j < std::min(hi, last); ++j) out[j - first] += part[j - lo];
  }
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
    if (absl::Status s = Decode(p->segments[i], p->data[i], nullptr); !s.ok()) return s;
  }
  uint64_t off = 0;
  for (size_t i = 0; i < p->segments.size(); ++i) {
    const Segment& s = p->segments[i];
    kernels::cpu::VoteAccumulate(reinterpret_cast<const uint8_t*>(p->data[i] + codec_internal::NumChunks(s) * 4), s.numel,
                                 counts + off);
    off += s.numel;
  }
  return absl::OkStatus();
}

void VoteSign(const int32_t* counts, size_t n, float* out) { kernels::cpu::VoteSign(counts, n, out); }

}  // namespace muloco
