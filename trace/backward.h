// The backward pass's rules over a cell's body, for deriving the cell's backward body
// (trace/cell_backward.cpp); Trace::backward records them over a whole trace (trace/backward.cpp).
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "ir/ir.h"

namespace edb::detail {

struct TraceState;

// A cell body's gradients (trace/cell_backward.cpp derives each cell's backward body with this): `seeds`
// pair each output with its gradient, a node of the same graph; `arguments` are the body's
// placeholders. A parameter's products are kept as pairs, so that the trace adds every call's
// into one contraction per weight. The body holds no lookup (its caller checks).
struct BodyGradients {
  std::vector<ir::NodeId> arguments;  // per argument: its gradient, or kNoNode when none flows
  struct Parameter {
    ir::NodeId node = ir::kNoNode;
    ir::NodeId whole = ir::kNoNode;  // the sum of its other terms, or kNoNode
    std::vector<std::pair<ir::NodeId, ir::NodeId>> pairs;  // (dy, x): a term dy x^T each
  };
  std::vector<Parameter> parameters;
};
// The rules over nodes [0, last] of `s`'s graph, recorded into it.
BodyGradients body_gradients(TraceState& s, ir::NodeId last, std::span<const std::pair<ir::NodeId, ir::NodeId>> seeds,
                             std::span<const ir::NodeId> arguments);

// A value of `shape` that lies at rows [at, at + its size) of column `source`: a slice of them,
// reshaped when the value is a matrix. With `placed_view`, both are typed as a call's output views
// are: never scheduled, placed by the planners inside their source (memplan::Plan::batch_views).
ir::NodeId read_rows(TraceState& s, ir::NodeId source, int64_t at, ir::Shape shape, bool placed_view = false);

}  // namespace edb::detail
