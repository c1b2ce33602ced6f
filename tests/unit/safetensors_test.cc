// A user's model file read back: the JSON header reader, ParseSafetensors against our own
// writer and against hand-made files in every dtype, and hostile files refused with a reason.
#include "common/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/json.h"

namespace muloco {
namespace {

TEST(Json, ReadsWhatSafetensorsHeadersHold) {
  absl::StatusOr<JsonValue> v = ParseJson(
      R"( {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, "s": "x\"\\\u00e9\ud83d\ude00", "n": -1.5e2,
           "t": true, "z": null, "e": [], "o": {}} )");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->object.size(), 7u);
  EXPECT_EQ(v->object[0].first, "a");  // order of appearance
  EXPECT_EQ(v->Find("a")->Find("shape")->array[1].number, 3);
  EXPECT_TRUE(v->Find("a")->Find("shape")->array[1].integer);
  EXPECT_EQ(v->Find("s")->string, "x\"\\\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v->Find("n")->number, -150);
  EXPECT_FALSE(v->Find("n")->integer);
  EXPECT_TRUE(v->Find("t")->boolean);
  EXPECT_EQ(v->Find("z")->type, JsonValue::Type::kNull);
}

TEST(Json, RefusesMalformedText) {
  for (const char* bad : {"", "{", "{\"a\":1,}", "{\"a\" 1}", "[1 2]", "\"abc", "{\"a\":1} x", "01x", "-",
                          "{\"a\":1,\"a\":2}", "\"\\x\"", "\"\\ud800\"", "1e999", "\"a\nb\""}) {
    EXPECT_FALSE(ParseJson(bad).ok()) << bad;
  }
  std::string deep(100, '[');
  deep += std::string(100, ']');
  EXPECT_FALSE(ParseJson(deep).ok());
}

ParamLayout TwoTensors() {
  ParamLayout l = {{"model.embed_tokens.weight", {4, 3}}, {"norm.weight", {3}}, {"scale", {}}};
  PlaceTensors(&l);
  return l;
}

TEST(Safetensors, ReadsBackWhatItWrites) {
  const ParamLayout l = TwoTensors();
  std::vector<float> params(TotalParams(l));
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.25f * static_cast<float>(i) - 1.0f;
  const std::string bytes = SafetensorsBytes(l, params.data(), {{"format", "muloco"}});
  absl::StatusOr<SafetensorsModel> m = ParseSafetensors(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->layout.size(), 3u);
  EXPECT_EQ(LayoutDifference(l, m->layout), "");
  EXPECT_EQ(m->layout[1].name, "norm.weight");  // the order of the data
  EXPECT_EQ(m->params, params);
  EXPECT_EQ(m->metadata.at("format"), "muloco");
}

// A file with one tensor of `dtype` holding `raw`, as another writer would make it.
std::string OneTensor(const std::string& dtype, const std::string& shape, const std::string& raw,
                      const std::string& offsets = "") {
  std::string header = absl::StrCat("{\"w\":{\"dtype\":\"", dtype, "\",\"shape\":", shape, ",\"data_offsets\":",
                                    offsets.empty() ? absl::StrCat("[0,", raw.size(), "]") : offsets, "}}");
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(&out[0], &n, 8);
  return out + header + raw;
}

TEST(Safetensors, ConvertsHalfBfloatAndDoubleToFloat) {
  const unsigned char f16[] = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0xff, 0x7b};  // 1, -2, 2^-24, 65504
  absl::StatusOr<SafetensorsModel> h = ParseSafetensors(OneTensor("F16", "[4]", std::string(reinterpret_cast<const char*>(f16), 8)));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->params, (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f}));
  const unsigned char bf16[] = {0x80, 0x3f, 0x40, 0xc0};  // 1, -3
  absl::StatusOr<SafetensorsModel> b = ParseSafetensors(OneTensor("BF16", "[2]", std::string(reinterpret_cast<const char*>(bf16), 4)));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->params, (std::vector<float>{1.0f, -3.0f}));
  const double d[] = {0.5, -1e-3};
  absl::StatusOr<SafetensorsModel> f = ParseSafetensors(OneTensor("F64", "[1,2]", std::string(reinterpret_cast<const char*>(d), 16)));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->params, (std::vector<float>{0.5f, static_cast<float>(-1e-3)}));
  EXPECT_EQ(f->layout[0].shape, (std::vector<int64_t>{1, 2}));
}

TEST(Safetensors, RefusesHostileFilesWithAReason) {
  const std::string four(16, '\0');
  const float nan = NAN;
  const struct {
    std::string bytes, reason;
  } cases[] = {
      {"abc", "shorter"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "header length"},
      {OneTensor("F32", "[4]", four).substr(0, 40), "header length"},
      {OneTensor("I64", "[2]", four), "dtype I64"},
      {OneTensor("F32", "[5]", four), "data_offsets"},              // shape and bytes disagree
      {OneTensor("F32", "[4]", four + "xxxx", "[0,16]"), "the file"},  // bytes no tensor holds
      {OneTensor("F32", "[0]", ""), "dimension"},
      {OneTensor("F32", "[2.5]", four), "dimension"},
      {OneTensor("F32", "[4]", four, "[4,20]"), "data_offsets"},   // a gap before it
      {OneTensor("F32", "[1]", std::string(reinterpret_cast<const char*>(&nan), 4)), "non-finite"},
      {OneTensor("F32", "[4]", four).replace(8, 1, "["), "JSON"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<SafetensorsModel> m = ParseSafetensors(c.bytes);
    ASSERT_FALSE(m.ok()) << c.reason;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(c.reason), absl::string_view::npos) << m.status() << " / " << c.reason;
  }
}

}  // namespace
}  // namespace muloco
