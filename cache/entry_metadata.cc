#include "cache/entry_metadata.h"

#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lazyrt::cache {
namespace {

using Json = nlohmann::json;

// Dimensions beyond this are not a tensor any device holds; the bound keeps products in range.
constexpr int64_t kMaxDimension = int64_t{1} << 40;

Json SignatureJson(const std::vector<TensorSignature>& tensors) {
  Json list = Json::array();
  for (const TensorSignature& t : tensors) list.push_back({{"dtype", t.dtype}, {"dims", t.dims}});
  return list;
}

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("cache entry metadata: \"", field, "\" ", what));
}

absl::StatusOr<std::string> StringField(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_string()) return FieldError(name, "is missing or not a string");
  return it->get<std::string>();
}

absl::StatusOr<int64_t> IntegerField(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_number_integer()) return FieldError(name, "is missing or not an integer");
  return it->get<int64_t>();
}

absl::StatusOr<std::vector<TensorSignature>> SignatureField(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_array() || it->size() > kMaxSignatureTensors) {
    return FieldError(name, absl::StrCat("is missing, not a list or longer than ", kMaxSignatureTensors));
  }
  std::vector<TensorSignature> tensors;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    const std::string where = absl::StrCat(name, "[", i, "]");
    if (!t.is_object()) return FieldError(where, "is not an object");
    absl::StatusOr<std::string> dtype = StringField(t, "dtype");
    if (!dtype.ok() || dtype->empty() || dtype->size() > 16) return FieldError(where, "has no valid dtype");
    auto dims = t.find("dims");
    if (dims == t.end() || !dims->is_array() || dims->size() > kMaxSignatureRank) {
      return FieldError(where, absl::StrCat("has no dims list of at most ", kMaxSignatureRank, " dimensions"));
    }
    TensorSignature signature{*std::move(dtype), {}};
    for (const Json& d : *dims) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxDimension) {
        return FieldError(where, absl::StrCat("has a dimension that is not an integer in [0, ", kMaxDimension, "]"));
      }
      signature.dims.push_back(d.get<int64_t>());
    }
    tensors.push_back(std::move(signature));
  }
  return tensors;
}

std::optional<std::string> TensorsMismatch(absl::string_view what, const std::vector<TensorSignature>& stored,
                                           const std::vector<TensorSignature>& graph) {
  if (stored.size() != graph.size()) {
    return absl::StrCat("the entry's executable has ", stored.size(), " ", what, "s, the graph ", graph.size());
  }
  for (size_t i = 0; i < stored.size(); ++i) {
    if (!(stored[i] == graph[i])) {
      return absl::StrCat("the entry's ", what, " ", i, " is ", stored[i].ToString(), ", the graph's is ",
                          graph[i].ToString());
    }
  }
  return std::nullopt;
}

}  // namespace

std::string TensorSignature::ToString() const { return absl::StrCat(dtype, "[", absl::StrJoin(dims, ","), "]"); }

std::string EncodeEntryMetadata(const EntryMetadata& m) {
  const KeyIngredients& k = m.ingredients;
  const Json json = {{"key", m.key},
                     {"graph_hash", m.graph_hash},
                     {"lazyrt_version", k.lazyrt_version},
                     {"lowering_version", k.lowering_version},
                     {"compiler_version", k.compiler_version},
                     {"device_kind", k.device_kind},
                     {"device_count", k.device_count},
                     {"compile_options", k.compile_options},
                     {"parameters", SignatureJson(m.parameters)},
                     {"results", SignatureJson(m.results)},
                     {"nodes", m.nodes},
                     {"module", m.module}};
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::StatusOr<EntryMetadata> DecodeEntryMetadata(absl::string_view text) {
  const Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InvalidArgumentError("cache entry metadata is not a JSON object (written by another program?)");
  }
  EntryMetadata m;
  KeyIngredients& k = m.ingredients;
  for (auto [field, name] : {std::pair{&m.key, "key"},
                             {&m.graph_hash, "graph_hash"},
                             {&k.lazyrt_version, "lazyrt_version"},
                             {&k.lowering_version, "lowering_version"},
                             {&k.compiler_version, "compiler_version"},
                             {&k.device_kind, "device_kind"},
                             {&k.compile_options, "compile_options"},
                             {&m.module, "module"}}) {
    absl::StatusOr<std::string> value = StringField(json, name);
    if (!value.ok()) return value.status();
    *field = *std::move(value);
  }
  for (auto [field, name] : {std::pair{&k.device_count, "device_count"}, {&m.nodes, "nodes"}}) {
    absl::StatusOr<int64_t> value = IntegerField(json, name);
    if (!value.ok()) return value.status();
    *field = *value;
  }
  absl::StatusOr<std::vector<TensorSignature>> parameters = SignatureField(json, "parameters");
  if (!parameters.ok()) return parameters.status();
  absl::StatusOr<std::vector<TensorSignature>> results = SignatureField(json, "results");
  if (!results.ok()) return results.status();
  m.parameters = *std::move(parameters);
  m.results = *std::move(results);
  return m;
}

std::optional<std::string> SignatureMismatch(const EntryMetadata& stored, const EntryMetadata& graph) {
  if (stored.key != graph.key) {
    return absl::StrCat("the entry's signature is of key \"", stored.key, "\", the graph's key is \"", graph.key, "\"");
  }
  if (auto mismatch = TensorsMismatch("parameter", stored.parameters, graph.parameters)) return mismatch;
  return TensorsMismatch("result", stored.results, graph.results);
}

std::optional<std::string> IngredientDifference(const KeyIngredients& stored, const KeyIngredients& current) {
  std::vector<std::string> differences;
  const auto compare = [&](absl::string_view name, const auto& a, const auto& b) {
    if (!(a == b)) differences.push_back(absl::StrCat(name, " (entry: ", a, ", this process: ", b, ")"));
  };
  compare("lazyrt version", stored.lazyrt_version, current.lazyrt_version);
  compare("lowering version", stored.lowering_version, current.lowering_version);
  compare("compiler version", stored.compiler_version, current.compiler_version);
  compare("device kind", stored.device_kind, current.device_kind);
  compare("device count", stored.device_count, current.device_count);
  compare("compile options", stored.compile_options, current.compile_options);
  if (differences.empty()) return std::nullopt;
  return absl::StrJoin(differences, "; ");
}

}  // namespace lazyrt::cache
