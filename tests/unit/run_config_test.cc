// The run-config table (common/run_config_fields.h) against the proto it describes: every
// field has exactly one row of the right type, each flag names one field, and the base and
// preset values are the ones the presets were tuned with.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "common/run_config.h"
#include "common/run_config_fields.h"

namespace muloco {
namespace {

struct Row {
  std::string flag, path;
  bool typed;
};

std::vector<Row> Rows() {
  return {
#define MULOCO_ROW(type, flag, path, base, help) {#flag, path, RunConfigFieldHasType<type>(path)},
      MULOCO_RUN_CONFIG_FIELDS(MULOCO_ROW)
#undef MULOCO_ROW
  };
}

// Every scalar field of the message, as "inner_steps" or "model.n_layer".
void ScalarPaths(const google::protobuf::Descriptor* d, const std::string& prefix, std::set<std::string>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      ScalarPaths(f->message_type(), prefix + f->name() + ".", out);
    } else {
      out->insert(prefix + f->name());
    }
  }
}

TEST(RunConfigFields, TheTableCoversEveryProtoFieldOnceWithItsType) {
  std::set<std::string> proto;
  ScalarPaths(v1::RunConfig::descriptor(), "", &proto);
  proto.erase("preset");  // a label set from --preset, not a flag of its own
  std::map<std::string, int> rows_per_path;
  std::set<std::string> flags;
  for (const Row& r : Rows()) {
    EXPECT_TRUE(r.typed) << r.path << ": no such field, or not the table's type";
    ++rows_per_path[r.path];
    EXPECT_TRUE(flags.insert(r.flag).second) << "flag --" << r.flag << " twice";
    EXPECT_EQ(FlagForField(r.path), r.flag);
  }
  for (const std::string& path : proto) EXPECT_EQ(rows_per_path[path], 1) << path;
  EXPECT_EQ(rows_per_path.size(), proto.size());
  EXPECT_FALSE(RunConfigFieldHasType<float>("inner_steps"));  // the check can fail
  EXPECT_FALSE(RunConfigFieldHasType<uint32_t>("model.no_such_field"));
}

TEST(RunConfigFields, FieldsReadAndWriteByPath) {
  v1::RunConfig c;
  SetRunConfigField<uint32_t>(&c, "model.n_layer", 7);
  SetRunConfigField<float>(&c, "outer_lr", 0.25f);
  SetRunConfigField<bool>(&c, "outer_nesterov", true);
  SetRunConfigField<std::string>(&c, "uplink_codec", "sign:chunk=4096");
  SetRunConfigField<uint64_t>(&c, "data_seed", uint64_t{1} << 40);
  EXPECT_EQ(c.model().n_layer(), 7u);
  EXPECT_EQ(c.outer_lr(), 0.25f);
  EXPECT_TRUE(c.outer_nesterov());
  EXPECT_EQ(c.uplink_codec(), "sign:chunk=4096");
  EXPECT_EQ(RunConfigField<uint64_t>(c, "data_seed"), uint64_t{1} << 40);
  EXPECT_EQ(RunConfigField<uint32_t>(c, "model.n_layer"), 7u);
}

TEST(RunConfigFields, PresetsStartFromTheBaseValues) {
  // The base (the demo model and schedule) and what the presets put over it.
  const v1::RunConfig diloco = *PresetConfig("diloco");
  EXPECT_EQ(diloco.model().d_model(), 64u);
  EXPECT_EQ(diloco.model().init_seed(), 1234u);
  EXPECT_EQ(diloco.inner_steps(), 20u);
  EXPECT_EQ(diloco.inner_lr(), 3e-3f);
  EXPECT_EQ(diloco.inner_min_lr_ratio(), 1.0f);  // the preset's, over the base's 0.1
  EXPECT_EQ(diloco.adam_eps(), 1e-8f);
  EXPECT_TRUE(diloco.outer_nesterov());
  const v1::RunConfig two = *PresetConfig("muloco-2bit");  // over muloco, over the base
  EXPECT_EQ(two.inner_optimizer(), "muon");
  EXPECT_EQ(two.muon_lr(), 0.03f);
  EXPECT_EQ(two.ef_beta(), 0.0f);
  EXPECT_EQ(two.beta2(), 0.95f);
  const v1::RunConfig sign = *PresetConfig("signmuon");
  EXPECT_EQ(sign.inner_min_lr_ratio(), 0.1f);
  EXPECT_FALSE(sign.outer_nesterov());
  for (const std::string& name : PresetNames()) EXPECT_TRUE(ValidateRunConfig(*PresetConfig(name)).ok()) << name;
}

}  // namespace
}  // namespace muloco
