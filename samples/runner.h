// The measurement loop shared by every sample model: warm up with one pass, then run the workload
// `repeat` times in traces of `batch` instances, timing recording apart from the engine's stages.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <edbatch/edbatch.h>

#include "samples/models.h"

namespace edb::samples {

struct RunOptions {
  int batch = 64;   // instances per trace
  int repeat = 3;   // measured passes over the workload; the median is reported
  std::function<void(int64_t done, int64_t total)> progress;  // optional, called per trace
};

struct RunResult {
  int64_t instances = 0;           // per pass
  int repeat = 0;
  double instances_per_sec = 0;    // median over passes
  double loss = 0;                 // summed loss of one pass (the same every pass)
  double trace_ms = 0;             // recording, summed over passes
  double total_ms = 0;             // wall time of all passes
  Stats stats;                     // engine counters and stage times over all passes
};

RunResult run_inference(SampleModel& model, Engine& engine, const RunOptions& options);

// Decoding from the model's own predictions (SampleModel::decodes): each trace runs `batch`
// instances' decode() programs together with run_instances, or, `one_at_a_time`, each instance's
// program alone in turn (reading its values one instance at a time: the way without programs).
struct DecodeResult {
  int64_t instances = 0;          // per pass
  int repeat = 0;
  double instances_per_sec = 0;   // median over passes
  Decoded decoded;                // of one pass (the same every pass)
  int64_t rounds = 0;             // evaluations, summed over passes
  double total_ms = 0;
  Stats stats;
};
DecodeResult run_decoding(SampleModel& model, Engine& engine, const RunOptions& options, bool one_at_a_time);

// Learns the engine's fsm policy from `traces` traces of `batch` instances (the workload's first
// ones, wrapping around), recorded but not run.
PolicyProgress train_policy(SampleModel& model, Engine& engine, int traces, int batch,
                            const PolicyTraining& training,
                            const std::function<void(const PolicyProgress&)>& progress = nullptr);

}  // namespace edb::samples
