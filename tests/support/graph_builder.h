// Building small IR graphs by hand in scheduler tests: an input of zeros, and an op whose shape
// is inferred from its arguments.
#pragma once

#include <vector>

#include "ir/ir.h"

namespace edb::testing {

inline ir::NodeId input(ir::Graph& graph, int rows) {
  const std::vector<float> zeros(size_t(rows), 0.0f);
  ir::Attributes attrs;
  attrs.index = graph.add_constants(zeros);
  return graph.add(ir::Op::input, {}, ir::Shape{rows, 1}, attrs);
}

inline ir::NodeId op(ir::Graph& graph, ir::Op o, std::vector<ir::NodeId> args) {
  std::vector<ir::Shape> shapes;
  for (ir::NodeId a : args) shapes.push_back(graph.node(a).shape);
  return graph.add(o, args, ir::infer_shape(o, shapes, {}), {});
}

}  // namespace edb::testing
