// The configurations the differential tests compare with the reference executor: every policy x
// executor x cells on/off x memplan on/off x threads, and the environment numbers that size them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/executor.h"
#include "scheduler/schedule.h"

namespace edb::testing {

struct Combination {
  std::string policy, executor;
  bool cells = true, memplan = false;
  int threads = 1;
};

inline std::string name_of(const Combination& c) {
  return c.policy + "/" + c.executor + "/cells " + (c.cells ? "on" : "off") + "/memplan " +
         (c.memplan ? "on" : "off") + "/threads " + std::to_string(c.threads);
}

// Threads 1 to max_threads, more than one only where execution can overlap recording (not the
// reference executor, which runs on one thread only).
inline std::vector<Combination> all_combinations(int max_threads) {
  std::vector<Combination> all;
  for (const std::string& policy : scheduler::policy_names())
    for (const std::string& executor : runtime::executor_names())
      for (bool cells : {false, true})
        for (bool memplan : {false, true})
          for (int threads = 1; threads <= max_threads; ++threads) {
            if (threads > 1 && executor == "reference") continue;
            all.push_back({policy, executor, cells, memplan, threads});
          }
  return all;
}

// The number in environment variable `name`, or `fallback` when it is unset or not a number
// ("all", say).
inline uint64_t env_number(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const uint64_t value = std::strtoull(text, &end, 10);
  return *end == '\0' ? value : fallback;
}

// The device named by environment variable `name` (the differential tests' device under test:
// every combination but the reference runs there), or "cpu" when it is unset or empty.
inline std::string env_device(const char* name) {
  const char* device = std::getenv(name);
  return device && *device ? device : "cpu";
}

}  // namespace edb::testing
