// The gradients of a sample model's summed losses: what the executor, thread and device tests
// compare across engines.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include <edbatch/edbatch.h>

#include "samples/models.h"

namespace edb::testing {

// The gradients of the sum of the losses of `sample`'s first `most` instances, recorded in one
// trace of `engine` and evaluated with its backward pass.
inline Gradients summed_loss_gradients(Engine& engine, samples::SampleModel& sample,
                                       size_t most = std::numeric_limits<size_t>::max()) {
  Trace trace(engine);
  std::vector<Expr> losses;
  for (size_t i = 0; i < std::min(sample.instance_count(), most); ++i) losses.push_back(sample.record_loss(trace, i));
  return trace.backward(sum(losses));
}

}  // namespace edb::testing
