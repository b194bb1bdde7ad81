// The learned policy's file: JSON, versioned, types by signature string, and a checksum over the
// content, so a table moves between processes and a damaged file is refused with a clear error.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "edbatch/errors.h"
#include "scheduler/fsm.h"
#include "scheduler/policy_file.h"

namespace edb::scheduler {

namespace {

constexpr const char* kFormat = "edbatch-fsm-policy";
constexpr int kVersion = 1;

using policy_file::checksum;
using policy_file::fail;

}  // namespace

void FsmPolicy::save(const std::string& path) const {
  nlohmann::json states = nlohmann::json::array();
  for (const auto& [key, entry] : table_) {
    if (entry.q.empty()) continue;  // visited during training, never acted on
    nlohmann::json q = nlohmann::json::array();
    for (const auto& [action, value] : entry.q) q.push_back({action, value});
    states.push_back({{"ready", ready_of(key)}, {"q", q}});
  }
  // Deterministic files for a deterministic training: order the states.
  std::sort(states.begin(), states.end(), [](const auto& a, const auto& b) { return a["ready"] < b["ready"]; });
  const nlohmann::json content = {{"encoding", encoding_ == Encoding::sort ? "sort" : "base"},
                                  {"types", names_},
                                  {"states", states}};
  policy_file::write(path, kFormat, kVersion, content);
  if (states.empty())
    std::fprintf(stderr,
                 "edb::Engine::save_policy(): warning: '%s' learned nothing: the table has no state, so every decision "
                 "falls back to greedy%s%s\n",
                 path.c_str(), stop_reason_.empty() ? "" : " (", stop_reason_.empty() ? "" : (stop_reason_ + ")").c_str());
}

void FsmPolicy::load(const std::string& path) {
  const nlohmann::json file = policy_file::parse(path);
  try {
    if (file.is_object() && file.value("format", "") == "edbatch-learned-policy")
      fail(path, "a learned (imitation) policy, not a Q-learning table of the fsm policy: run it with policy learned");
    if (!file.is_object() || file.value("format", "") != kFormat) fail(path, std::string("not an ") + kFormat + " file");
    // Numbers are checked before conversion: nlohmann casts a float or an out-of-range integer
    // to an integer type without checking (undefined behaviour the fuzzer found).
    auto index = [&](const nlohmann::json& j, const char* what) {
      if (!j.is_number_unsigned() || j.get<uint64_t>() > UINT32_MAX)
        fail(path, std::string(what) + " must be a non-negative integer, got " + j.dump());
      return uint32_t(j.get<uint64_t>());
    };
    const nlohmann::json& version_field = file.at("version");
    if (!version_field.is_number_integer()) fail(path, "the version must be an integer, got " + version_field.dump());
    const int64_t version = version_field.get<int64_t>();
    if (version != kVersion)
      fail(path, "format version " + std::to_string(version) + ", this build reads version " + std::to_string(kVersion));
    const nlohmann::json& content = file.at("content");
    if (file.at("checksum").get<std::string>() != checksum(content)) fail(path, "checksum mismatch (the file is damaged)");
    const Encoding encoding = content.at("encoding").get<std::string>() == "sort" ? Encoding::sort : Encoding::base;
    const auto types = content.at("types").get<std::vector<std::string>>();
    // Parse everything before replacing this policy's table.
    Table table;
    for (const auto& state : content.at("states")) {
      std::vector<uint32_t> ready;
      const nlohmann::json& ready_field = state.at("ready");
      if (!ready_field.is_array()) fail(path, "a state's ready types must be an array");
      for (const auto& t : ready_field) ready.push_back(index(t, "a ready type"));
      for (uint32_t t : ready)
        if (t >= types.size()) fail(path, "a state names type " + std::to_string(t) + " of " + std::to_string(types.size()));
      Entry entry;
      for (const auto& pair : state.at("q")) {
        const uint32_t action = index(pair.at(0), "an action");
        if (action >= types.size())
          fail(path, "an action names type " + std::to_string(action) + " of " + std::to_string(types.size()));
        entry.set(action, pair.at(1).get<double>());
      }
      table.emplace(key_of(std::move(ready), encoding), std::move(entry));
    }
    encoding_ = encoding;
    names_ = types;
    index_of_name_.clear();
    for (uint32_t i = 0; i < names_.size(); ++i) index_of_name_.emplace(names_[i], i);
    table_ = std::move(table);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("unexpected content: ") + e.what());
  }
}

}  // namespace edb::scheduler
