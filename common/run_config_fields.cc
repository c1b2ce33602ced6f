// Reading and writing a run-config field by its path (see run_config_fields.h).
#include "common/run_config_fields.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/str_split.h"

namespace muloco {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

template <typename T>
constexpr FieldDescriptor::CppType kCppType = FieldDescriptor::CPPTYPE_STRING;
template <>
constexpr FieldDescriptor::CppType kCppType<uint32_t> = FieldDescriptor::CPPTYPE_UINT32;
template <>
constexpr FieldDescriptor::CppType kCppType<uint64_t> = FieldDescriptor::CPPTYPE_UINT64;
template <>
constexpr FieldDescriptor::CppType kCppType<float> = FieldDescriptor::CPPTYPE_FLOAT;
template <>
constexpr FieldDescriptor::CppType kCppType<bool> = FieldDescriptor::CPPTYPE_BOOL;

// The scalar field at `path` below `d`, with the descriptors of the messages on the way.
const FieldDescriptor* Find(const google::protobuf::Descriptor* d, const char* path,
                            std::vector<const FieldDescriptor*>* way) {
  const std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const FieldDescriptor* f = d->FindFieldByName(parts[i]);
    if (f == nullptr || f->is_repeated()) return nullptr;
    if (i + 1 == parts.size()) return f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE ? nullptr : f;
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return nullptr;
    way->push_back(f);
    d = f->message_type();
  }
  return nullptr;
}

template <typename T>
const FieldDescriptor* Checked(const char* path, std::vector<const FieldDescriptor*>* way) {
  const FieldDescriptor* f = Find(v1::RunConfig::descriptor(), path, way);
  if (f == nullptr || f->cpp_type() != kCppType<T>) std::abort();  // the table disagrees with the proto
  return f;
}

}  // namespace

template <typename T>
bool RunConfigFieldHasType(const char* path) {
  std::vector<const FieldDescriptor*> way;
  const FieldDescriptor* f = Find(v1::RunConfig::descriptor(), path, &way);
  return f != nullptr && f->cpp_type() == kCppType<T>;
}

template <typename T>
T RunConfigField(const v1::RunConfig& config, const char* path) {
  std::vector<const FieldDescriptor*> way;
  const FieldDescriptor* f = Checked<T>(path, &way);
  const Message* m = &config;
  for (const FieldDescriptor* step : way) m = &m->GetReflection()->GetMessage(*m, step);
  const google::protobuf::Reflection* r = m->GetReflection();
  if constexpr (std::is_same_v<T, uint32_t>) return r->GetUInt32(*m, f);
  if constexpr (std::is_same_v<T, uint64_t>) return r->GetUInt64(*m, f);
  if constexpr (std::is_same_v<T, float>) return r->GetFloat(*m, f);
  if constexpr (std::is_same_v<T, bool>) return r->GetBool(*m, f);
  if constexpr (std::is_same_v<T, std::string>) return r->GetString(*m, f);
}

template <typename T>
void SetRunConfigField(v1::RunConfig* config, const char* path, const T& value) {
  std::vector<const FieldDescriptor*> way;
  const FieldDescriptor* f = Checked<T>(path, &way);
  Message* m = config;
  for (const FieldDescriptor* step : way) m = m->GetReflection()->MutableMessage(m, step);
  const google::protobuf::Reflection* r = m->GetReflection();
  if constexpr (std::is_same_v<T, uint32_t>) r->SetUInt32(m, f, value);
  if constexpr (std::is_same_v<T, uint64_t>) r->SetUInt64(m, f, value);
  if constexpr (std::is_same_v<T, float>) r->SetFloat(m, f, value);
  if constexpr (std::is_same_v<T, bool>) r->SetBool(m, f, value);
  if constexpr (std::is_same_v<T, std::string>) r->SetString(m, f, value);
}

#define MULOCO_INSTANTIATE(T)                                                    \
  template bool RunConfigFieldHasType<T>(const char*);                          \
  template T RunConfigField<T>(const v1::RunConfig&, const char*);              \
  template void SetRunConfigField<T>(v1::RunConfig*, const char*, const T&);
MULOCO_INSTANTIATE(uint32_t)
MULOCO_INSTANTIATE(uint64_t)
MULOCO_INSTANTIATE(float)
MULOCO_INSTANTIATE(bool)
MULOCO_INSTANTIATE(std::string)
#undef MULOCO_INSTANTIATE

}  // namespace muloco
