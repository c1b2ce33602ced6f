// Presets, validation and the inner learning-rate schedule.
#include "common/run_config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codec/codec.h"
#include "common/model_layout.h"
#include "common/run_config_fields.h"

namespace muloco {
namespace {

// Presets as data: each preset's own fields, in the text format a --config file uses, over
// the base configuration (run_config_fields.h: the demo model, data and schedule) or over
// another preset.
struct Preset {
  const char* name;
  const char* over;    // the preset these fields go over; nullptr: the base
  const char* fields;
};
// lloyd:bits=2,chunk=4096 is 2.03 bits per element: 2-bit codes + a 4-float table per 4096
// (chunk by the frontier sweep, bench/README.md: 256 / 512 / 2048 / 4096 gave 2.4588 / 2.4657 /
// 2.4649 / 2.4484 on muloco-2bit, so the largest, at the fewest bytes).
constexpr Preset kPresets[] = {
    // Outer momentum 0.6, not the DiLoCo paper's 0.9 (at H = 500): on this model 0.9 overshoots
    // after the first round, and the frontier sweep (bench/README.md) gave 2.5885 / 2.5738 /
    // 2.5589 for 0.9 / 0.8 / 0.6 (with the cosine floor 0.1 of the time; at floor 1.0 momentum
    // 0.4 / 0.6 / 0.8 gave 2.5111 / 2.5050 / 2.4988, within the seeds' spread, and outer lr
    // 0.5 / 0.7 / 1.0 2.5238 / 2.5050 / 2.5393). Muon's weight decay is 0 by the same sweep
    // (MuLoCo: 1e-4).
    // A constant inner lr after warmup (floor 1.0) by a sweep (0e4dc26; bench/README.md, "The
    // sweeps behind the presets"): cosine floors 0.1 / 0.7 / 1.0 gave 2.5589 / 2.5163 / 2.5050 on
    // 10 rounds and 2.2345 / 2.1767 / 2.1711 on 30; inner lr 2e-3 and 5e-3 were worse, at floors
    // 0.7 and 1.0.
    {"diloco", nullptr, R"pb(inner_min_lr_ratio: 1.0)pb"},
    // The MuLoCo presets (this one and those over it): inner schedule and outer lr by a
    // sweep (bench/README.md): Muon lr 0.03 (0.02 before) and a cosine floor of 0.7 (0.1), outer
    // lr 0.7 (1.0). Dense MuLoCo went from 2.4005 to 2.3042 on 10 rounds and from 2.0004 to
    // 1.9579 on 30; a floor of 1.0 or Muon lr 0.04 do better on 10 rounds and worse on 30, so
    // these are the settings good on both.
    {"muloco", nullptr, R"pb(inner_optimizer: "muon" muon_lr: 0.03 inner_min_lr_ratio: 0.7 outer_lr: 0.7)pb"},
    // No uplink error feedback (ef_beta 0; the downlink keeps θ_true − θ_pub, which the
    // replicas' bit-identity needs): the frontier sweeps (bench/README.md) gave ef_beta 1 / 0
    // 2.4519 / 2.4436 (32d20d5) and 2.4484 / 2.4385 (d5e35bd) on 10 rounds, 2.1572 / 2.1495 on
    // 20, 2.0206 / 2.0064 on 30, 1.8639 / 1.8437 on 60, and deploy/wan's 20-round volunteer
    // run 2.2270 / 2.1923.
    {"muloco-2bit", "muloco",
     R"pb(ef_beta: 0 uplink_codec: "lloyd:bits=2,chunk=4096" downlink_codec: "lloyd:bits=2,chunk=4096")pb"},
    // At most 1 bit per parameter up and 2 down: 1-bit Lloyd on a seeded 93% of each chunk up,
    // 2-bit on 95% down, vectors too. Its coarser codes want less outer momentum, a larger outer
    // lr and no uplink error feedback (ef_beta 0; the downlink keeps θ_true − θ_pub): the
    // frontier sweeps (bench/README.md) gave, over ef_beta 0.8 / 0.6 / 0.4 / 0.2 / 0, 2.4846 /
    // 2.4750 / 2.4678 / 2.4674 / 2.4658 on 10 rounds and 2.0239 / - / 2.0031 / - / 1.9934 on 30
    // (dense MuLoCo 2.0004), with momentum 0.2 and lr 1.6. With the schedule's floor at 0.7 its
    // Muon lr is its own: 0.03 / 0.04 / 0.05 gave 2.3529 / 2.3163 / 2.3706 (2026-12-05).
    {"muloco-1bit", "muloco",
     R"pb(muon_lr: 0.04 outer_lr: 1.6 outer_momentum: 0.2 ef_beta: 0
          uplink_codec: "lloyd:bits=1,chunk=4096,keep=0.93,vectors=same"
          downlink_codec: "lloyd:bits=2,chunk=4096,keep=0.95,vectors=same")pb"},
    // Sign steps move |dW| = outer_lr x the inner schedule per coordinate, after the inner
    // optimizer's decoupled decay (run_server.cc); momentum lives in each worker's Muon.
    // lr 6e-3 by the sweep (3e-3 / 6e-3 / 1e-2: 2.2661 / 2.1668 / 2.2074). The base's cosine floor
    // 0.1 by a sweep (918151b): 0.4 gave 2.1330 against 2.1636 on 10 rounds, 1.9046 against
    // 1.8846 on 30.
    {"signmuon", nullptr,
     R"pb(mode: "signmuon" inner_optimizer: "muon" inner_steps: 1 total_rounds: 200 warmup_steps: 10
          uplink_codec: "sign:chunk=4096,vectors=same" downlink_codec: "quant:bits=2,chunk=4096"
          outer_lr: 6e-3 outer_momentum: 0.0 outer_nesterov: false eval_every: 20)pb"},
};

const Preset* FindPreset(absl::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

// Every field's base value (run_config_fields.h).
v1::RunConfig BaseConfig() {
  v1::RunConfig c;
#define MULOCO_BASE(type, flag, path, base, help) SetRunConfigField<type>(&c, path, base);
  MULOCO_RUN_CONFIG_FIELDS(MULOCO_BASE)
#undef MULOCO_BASE
  return c;
}

// The base, then the presets `p` goes over, then its own fields; false when one does not parse.
bool MergePreset(const Preset& p, v1::RunConfig* c) {
  if (p.over) {
    const Preset* over = FindPreset(p.over);
    if (!over || !MergePreset(*over, c)) return false;
  } else {
    *c = BaseConfig();
  }
  return google::protobuf::TextFormat::MergeFromString(p.fields, c);
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

absl::StatusOr<v1::RunConfig> PresetConfig(absl::string_view name) {
  if (const Preset* p = FindPreset(name)) {
    v1::RunConfig c;
    if (!MergePreset(*p, &c)) {
      return absl::InternalError(absl::StrCat("preset ", name, " does not parse"));  // a bug: tests parse them all
    }
    c.set_preset(std::string(name));
    return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown preset '", name, "' (known: ", absl::StrJoin(PresetNames(), ", "), ")"));
}

absl::Status MergeRunConfigText(absl::string_view text, v1::RunConfig* config) {
  google::protobuf::TextFormat::Parser parser;
  std::string errors;
  struct Collector : google::protobuf::io::ErrorCollector {
    std::string* out;
    explicit Collector(std::string* o) : out(o) {}
    void AddError(int line, int column, const std::string& message) override {
      absl::StrAppend(out, out->empty() ? "" : "; ", "line ", line + 1, " column ", column + 1, ": ", message);
    }
  } collector(&errors);
  parser.RecordErrorsTo(&collector);
  if (!parser.MergeFromString(std::string(text), config)) return absl::InvalidArgumentError(errors);
  return absl::OkStatus();
}

namespace {

// Every field, default values included (TextFormat's printer leaves proto3 defaults out, and
// a --config file merged over a preset must restate them).
void PrintAll(const google::protobuf::Message& m, const std::string& indent, std::string* out) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      absl::StrAppend(out, indent, f->name(), " {\n");
      PrintAll(m.GetReflection()->GetMessage(m, f), indent + "  ", out);
      absl::StrAppend(out, indent, "}\n");
      continue;
    }
    std::string v;
    google::protobuf::TextFormat::PrintFieldValueToString(m, f, -1, &v);
    absl::StrAppend(out, indent, f->name(), ": ", v, "\n");
  }
}

}  // namespace

std::string RunConfigText(const v1::RunConfig& config) {
  std::string out;
  PrintAll(config, "", &out);
  return out;
}

std::vector<std::string> DifferentFields(const v1::RunConfig& a, const v1::RunConfig& b) {
  std::vector<std::string> out;
  std::function<void(const google::protobuf::Message&, const google::protobuf::Message&, const std::string&)> walk =
      [&](const google::protobuf::Message& x, const google::protobuf::Message& y, const std::string& prefix) {
        const google::protobuf::Descriptor* d = x.GetDescriptor();
        for (int i = 0; i < d->field_count(); ++i) {
          const google::protobuf::FieldDescriptor* f = d->field(i);
          if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
            walk(x.GetReflection()->GetMessage(x, f), y.GetReflection()->GetMessage(y, f), prefix + f->name() + ".");
            continue;
          }
          std::string vx, vy;
          google::protobuf::TextFormat::PrintFieldValueToString(x, f, -1, &vx);
          google::protobuf::TextFormat::PrintFieldValueToString(y, f, -1, &vy);
          if (vx != vy) out.push_back(prefix + f->name());
        }
      };
  walk(a, b, "");
  return out;
}

std::string FlagForField(const std::string& field) {
#define MULOCO_FLAG(type, flag, path, base, help) \
  if (field == path) return #flag;
  MULOCO_RUN_CONFIG_FIELDS(MULOCO_FLAG)
#undef MULOCO_FLAG
  return field;
}

v1::RunConfig DefaultRunConfig() { return *PresetConfig(kDefaultPreset); }

absl::Status ValidateRunConfig(const v1::RunConfig& c) {
  if (absl::Status s = ValidateModelSpec(c.model()); !s.ok()) return s;
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("run config: " + m); };
  absl::StatusOr<RunKinds> kinds = ParseKinds(c);
  if (!kinds.ok()) return kinds.status();
  if (c.inner_steps() < 1) return bad("inner_steps (H) must be >= 1");
  if (c.total_rounds() < 1) return bad("total_rounds must be >= 1");
  if (c.batch_size() < 1 || c.batch_size() > 65536) return bad("batch_size must be in [1, 65536]");
  if (!(c.inner_lr() > 0 && c.inner_lr() < 10)) return bad("inner_lr must be in (0, 10)");
  if (!(c.muon_lr() > 0 && c.muon_lr() < 10)) return bad("muon_lr must be in (0, 10)");
  if (!(c.muon_momentum() >= 0 && c.muon_momentum() < 1)) return bad("muon_momentum must be in [0, 1)");
  if (c.ns_steps() < 1 || c.ns_steps() > 100) return bad("ns_steps must be in [1, 100]");
  if (!(c.inner_min_lr_ratio() >= 0 && c.inner_min_lr_ratio() <= 1)) return bad("inner_min_lr_ratio must be in [0, 1]");
  if (!(c.weight_decay() >= 0 && c.weight_decay() < 10)) return bad("weight_decay must be in [0, 10)");
  if (!(c.muon_weight_decay() >= 0 && c.muon_weight_decay() < 10)) return bad("muon_weight_decay must be in [0, 10)");
  if (!(c.beta1() >= 0 && c.beta1() < 1 && c.beta2() >= 0 && c.beta2() < 1)) return bad("betas must be in [0, 1)");
  if (!(c.adam_eps() > 0 && c.adam_eps() < 1)) return bad("adam_eps must be in (0, 1)");
  if (!(c.grad_clip() >= 0 && std::isfinite(c.grad_clip()))) return bad("grad_clip must be >= 0 (0: off)");
  if (!(c.ef_beta() >= 0 && c.ef_beta() <= 1)) return bad("ef_beta must be in [0, 1]");
  if (!(c.outer_lr() > 0 && c.outer_lr() < 10)) return bad("outer_lr must be in (0, 10)");
  if (!(c.outer_momentum() >= 0 && c.outer_momentum() < 1)) return bad("outer_momentum must be in [0, 1)");
  absl::StatusOr<CodecConfig> up = ParseCodec(c.uplink_codec());
  if (!up.ok()) return up.status();
  if (absl::Status s = ParseCodec(c.downlink_codec()).status(); !s.ok()) return s;
  if (kinds->mode == RunMode::kSignMuon) {
    if (up->scheme != Scheme::kSign || up->dense_vectors) return bad("signmuon needs uplink_codec sign:...,vectors=same");
    if (c.inner_steps() != 1) return bad("signmuon takes one step per round (inner_steps 1)");
    if (kinds->inner != InnerOptimizer::kMuon) return bad("signmuon needs inner_optimizer muon");
  }
  return absl::OkStatus();
}

absl::StatusOr<RunKinds> ParseKinds(const v1::RunConfig& c) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("run config: " + m); };
  RunKinds k;
  if (c.mode() == "signmuon") k.mode = RunMode::kSignMuon;
  else if (c.mode() != "diloco") return bad("mode must be diloco or signmuon");
  if (c.sync() == "async") k.async = true;
  else if (c.sync() != "sync" && !c.sync().empty()) return bad("sync must be sync or async");
  if (k.async && k.mode != RunMode::kDiloco) return bad("sync async needs mode diloco (a vote has no staleness weight)");
  if (c.inner_optimizer() == "muon") k.inner = InnerOptimizer::kMuon;
  else if (c.inner_optimizer() != "adamw") return bad("inner_optimizer must be adamw or muon");
  if (c.muon_scale() == "adamw") k.muon_scale = MuonScale::kMatchAdamW;
  else if (c.muon_scale() != "shape") return bad("muon_scale must be shape or adamw");
  return k;
}

double MuonShapeScale(int64_t rows, int64_t cols, MuonScale rule) {
  if (rule == MuonScale::kShape) return std::sqrt(std::max(1.0, static_cast<double>(rows) / cols));
  return 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
}

RunKinds KindsOf(const v1::RunConfig& c) {
  absl::StatusOr<RunKinds> k = ParseKinds(c);
  return k.ok() ? *k : RunKinds{};
}

std::string DescribeRunConfig(const v1::RunConfig& c) {
  const v1::ModelSpec& m = c.model();
  const std::string llama = IsLlama(m) ? absl::StrCat(", kv heads ", KvHeads(m), ", ffn ", FfnDim(m),
                                                      m.tie_embeddings() ? ", tied" : "")
                                        : "";
  return absl::StrCat(c.preset().empty() ? "" : c.preset() + ": ", c.mode(), KindsOf(c).async ? " (async)" : "", IsLlama(m) ? ", LLaMA(vocab " : ", GPT(vocab ",
                      m.vocab_size(), ", layers ", m.n_layer(), ", heads ", m.n_head(), llama, ", d ", m.d_model(),
                      ", ctx ", m.context(), ") H=", c.inner_steps(), " rounds=", c.total_rounds(), " batch=", c.batch_size(), " inner=",
                      c.inner_optimizer(), " lr=", c.inner_lr(),
                      KindsOf(c).inner == InnerOptimizer::kMuon ? absl::StrCat(" muon_lr=", c.muon_lr()) : "",
                      " outer lr=", c.outer_lr(), " m=", c.outer_momentum(), " up=", c.uplink_codec(),
                      " down=", c.downlink_codec(), " ef_beta=", c.ef_beta());
}

float WeightDecayFor(const v1::RunConfig& c, ParamGroup group) {
  if (!Decays(group)) return 0.0f;
  return KindsOf(c).inner == InnerOptimizer::kMuon && UsesMuon(group) ? c.muon_weight_decay() : c.weight_decay();
}

double LearningRateFactor(const v1::RunConfig& c, uint64_t step) {
  if (step < c.warmup_steps()) return static_cast<double>(step + 1) / c.warmup_steps();
  const double total = static_cast<double>(c.total_rounds()) * c.inner_steps();
  const double span = std::max(1.0, total - c.warmup_steps());
  const double progress = std::min(1.0, (step - c.warmup_steps()) / span);
  const double floor = c.inner_min_lr_ratio();
  return floor + 0.5 * (1.0 - floor) * (1.0 + std::cos(M_PI * progress));
}

double InnerLearningRate(const v1::RunConfig& c, uint64_t step) { return c.inner_lr() * LearningRateFactor(c, step); }

}  // namespace muloco
