// The learned policy's file: JSON, versioned, types by signature string, the models it was trained
// on and its training report, with a checksum over the content; a file of another kind, version or
// a damaged one is refused with a message that names the path and what to do.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "edbatch/errors.h"
#include "scheduler/imitation.h"
#include "scheduler/policy_file.h"

namespace edb::scheduler {

namespace {

constexpr const char* kFormat = "edbatch-learned-policy";
constexpr const char* kFsmFormat = "edbatch-fsm-policy";
// 3: the feature says whether the type has the longest chain left; 4: the remaining bases; 5: the
// steep remaining bases; 6: the boosted one (a version 4 or 5 file reads the same).
constexpr int kVersion = 6;
constexpr int kOldestVersion = 4;

using policy_file::checksum;
using policy_file::fail;

const char* base_name(ImitationPolicy::Base base) {
  switch (base) {
    case ImitationPolicy::Base::greedy: return "greedy";
    case ImitationPolicy::Base::tight_then_greedy: return "tight-greedy";
    case ImitationPolicy::Base::tight_first: return "tight-first";
    case ImitationPolicy::Base::remaining: return "remaining";
    case ImitationPolicy::Base::remaining_cheap: return "remaining-cheap";
    case ImitationPolicy::Base::remaining_steep: return "remaining-steep";
    case ImitationPolicy::Base::remaining_steep_cheap: return "remaining-steep-cheap";
    case ImitationPolicy::Base::remaining_steep_boosted: return "remaining-steep-boosted";
  }
  return "greedy";
}

nlohmann::json report_json(const LearnedReport& r) {
  return {{"traces", r.traces}, {"heldout_traces", r.heldout_traces}, {"batches", r.batches},
          {"greedy_batches", r.greedy_batches}, {"search_batches", r.search_batches}, {"lower_bound", r.lower_bound},
          {"heldout_batches", r.heldout_batches}, {"heldout_greedy_batches", r.heldout_greedy_batches},
          {"heldout_lower_bound", r.heldout_lower_bound}, {"decisions", r.decisions}, {"fallbacks", r.fallbacks},
          {"states", r.states}, {"searches_cut_short", r.searches_cut_short}, {"beats_greedy", r.beats_greedy},
          {"greedy_fallback", r.greedy_fallback},
          {"stop_reason", r.stop_reason}};
}

LearnedReport report_of(const nlohmann::json& j) {
  LearnedReport r;
  r.traces = j.at("traces").get<int64_t>();
  r.heldout_traces = j.at("heldout_traces").get<int64_t>();
  r.batches = j.at("batches").get<int64_t>();
  r.greedy_batches = j.at("greedy_batches").get<int64_t>();
  r.search_batches = j.at("search_batches").get<int64_t>();
  r.lower_bound = j.at("lower_bound").get<int64_t>();
  r.heldout_batches = j.at("heldout_batches").get<int64_t>();
  r.heldout_greedy_batches = j.at("heldout_greedy_batches").get<int64_t>();
  r.heldout_lower_bound = j.at("heldout_lower_bound").get<int64_t>();
  r.decisions = j.at("decisions").get<int64_t>();
  r.fallbacks = j.at("fallbacks").get<int64_t>();
  r.states = j.at("states").get<int64_t>();
  r.searches_cut_short = j.at("searches_cut_short").get<int64_t>();
  r.beats_greedy = j.at("beats_greedy").get<bool>();
  r.greedy_fallback = j.at("greedy_fallback").get<bool>();
  r.stop_reason = j.at("stop_reason").get<std::string>();
  return r;
}

}  // namespace

void ImitationPolicy::save(const std::string& path) const {
  nlohmann::json scores = nlohmann::json::array();
  std::vector<std::pair<uint32_t, float>> sorted(scores_.begin(), scores_.end());
  std::sort(sorted.begin(), sorted.end());  // deterministic files
  for (const auto& [key, score] : sorted) scores.push_back({key / kBuckets, key % kBuckets, score});
  const nlohmann::json content = {{"types", names_}, {"models", models_}, {"base", base_name(base_)}, {"scores", scores},
                                  {"report", report_json(report_)}};
  policy_file::write(path, kFormat, kVersion, content);
  if (learned_nothing())
    std::fprintf(stderr,
                 "edb::Engine::save_policy(): warning: '%s' learned nothing: every decision falls back to greedy "
                 "(%s)\n",
                 path.c_str(), report_.stop_reason.empty() ? "never trained" : report_.stop_reason.c_str());
}

void ImitationPolicy::load(const std::string& path) {
  const nlohmann::json file = policy_file::parse(path);
  try {
    if (!file.is_object()) fail(path, std::string("not an ") + kFormat + " file");
    const std::string format = file.value("format", "");
    if (format == kFsmFormat)
      fail(path, "a Q-learning table of the fsm policy, not a learned (imitation) policy: run it with policy fsm");
    if (format != kFormat) fail(path, std::string("not an ") + kFormat + " file");
    const nlohmann::json& version_field = file.at("version");
    if (!version_field.is_number_integer()) fail(path, "the version must be an integer, got " + version_field.dump());
    const int64_t version = version_field.get<int64_t>();
    if (version < kOldestVersion || version > kVersion)
      fail(path, "format version " + std::to_string(version) + ", this build reads versions " +
                     std::to_string(kOldestVersion) + " to " + std::to_string(kVersion) +
                     ": train the policy again with this build");
    const nlohmann::json& content = file.at("content");
    if (file.at("checksum").get<std::string>() != checksum(content)) fail(path, "checksum mismatch (the file is damaged)");
    const auto types = content.at("types").get<std::vector<std::string>>();
    auto models = content.at("models").get<std::vector<std::string>>();
    std::sort(models.begin(), models.end());
    std::unordered_map<uint32_t, float> scores;
    for (const auto& entry : content.at("scores")) {
      if (!entry.is_array() || entry.size() != 3 || !entry[0].is_number_unsigned() || !entry[1].is_number_unsigned() ||
          !entry[2].is_number())
        fail(path, "a score must be [type, bucket, value], got " + entry.dump());
      const uint64_t type = entry[0].get<uint64_t>(), bucket = entry[1].get<uint64_t>();
      if (type >= types.size()) fail(path, "a score names type " + std::to_string(type) + " of " + std::to_string(types.size()));
      if (bucket >= kBuckets) fail(path, "a score names bucket " + std::to_string(bucket) + " of " + std::to_string(kBuckets));
      scores[uint32_t(type) * kBuckets + uint32_t(bucket)] = entry[2].get<float>();
    }
    LearnedReport report = report_of(content.at("report"));
    const std::string base = content.at("base").get<std::string>();
    Base parsed = Base::greedy;
    if (base == "tight-greedy") parsed = Base::tight_then_greedy;
    else if (base == "tight-first") parsed = Base::tight_first;
    else if (base == "remaining") parsed = Base::remaining;
    else if (base == "remaining-cheap") parsed = Base::remaining_cheap;
    else if (version >= 5 && base == "remaining-steep") parsed = Base::remaining_steep;
    else if (version >= 5 && base == "remaining-steep-cheap") parsed = Base::remaining_steep_cheap;
    else if (version >= 6 && base == "remaining-steep-boosted") parsed = Base::remaining_steep_boosted;
    else if (base != "greedy")
      fail(path, "unknown base '" + base + "' (expected greedy, tight-greedy, tight-first, remaining" +
                     (version >= 6   ? ", remaining-cheap, remaining-steep, remaining-steep-cheap or remaining-steep-boosted)"
                      : version >= 5 ? ", remaining-cheap, remaining-steep or remaining-steep-cheap)"
                                     : " or remaining-cheap)"));
    names_ = types;
    index_of_name_.clear();
    for (uint32_t i = 0; i < names_.size(); ++i) index_of_name_.emplace(names_[i], i);
    scores_ = std::move(scores);
    dense_stale_ = true;
    index_of_global_.clear();
    models_ = std::move(models);
    report_ = std::move(report);
    base_ = parsed;
    path_ = path;
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("unexpected content: ") + e.what());
  }
}

}  // namespace edb::scheduler
