// libFuzzer target: the fsm policy file (FsmPolicy::load). A bad file is a UsageError, and a loaded
// table saves and loads again with the same states. Inputs whose first byte is 1 are JSON for the
// file's "content", wrapped with the right format, version and checksum, so the fuzzer reaches the
// content checks behind the checksum; other inputs are the whole file.
#include <nlohmann/json.hpp>

#include "scheduler/fsm.h"
#include "scheduler/policy_file.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edb;
  std::string path;
  if (size > 0 && data[0] == 1) {
    const nlohmann::json content =
        nlohmann::json::parse(data + 1, data + size, nullptr, /*allow_exceptions=*/false);
    if (content.is_discarded()) return 0;
    const nlohmann::json file = {{"format", "edbatch-fsm-policy"}, {"version", 1}, {"content", content},
                                 {"checksum", scheduler::policy_file::checksum(content)}};
    const std::string text = file.dump();
    path = fuzz::write_scratch("wrapped.policy", reinterpret_cast<const uint8_t*>(text.data()), text.size());
  } else {
    path = fuzz::write_scratch("raw.policy", data, size);
  }
  scheduler::FsmPolicy policy;
  if (!fuzz::accepts([&] { policy.load(path); })) return 0;
  const std::string saved = fuzz::scratch_directory() + "/saved.policy";
  policy.save(saved);
  scheduler::FsmPolicy again;
  fuzz::require(fuzz::accepts([&] { again.load(saved); }), "a saved policy loads");
  fuzz::require(again.state_count() == policy.state_count(), "a saved policy keeps its states");
  return 0;
}
