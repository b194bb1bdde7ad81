// Cells: a static subgraph declared once and called many times. Each call is one node for the
// policy; calls of one cell batch together and run the cell's own fewest-batch schedule.
#include <edbatch/edbatch.h>

#include <cmath>
#include <cstdio>
#include <functional>

// Complete binary trees of 2 or 3 levels over constant leaves, combined by one cell; returns
// the first row of the sum of the roots.
float tree_sum(edb::Engine& engine, edb::Model& model, int trees) {
  const edb::Parameter U = model.parameter("U"), b = model.parameter("b");
  edb::Cell combine("combine", {{4, 1}, {4, 1}}, [&](edb::Trace& t, std::span<const edb::Expr> in) {
    edb::Expr h = edb::tanh(edb::affine({t.param(b), t.param(U), edb::concat({in[0], in[1]})}));
    return std::vector<edb::Expr>{h, edb::sigmoid(h)};  // a cell may return several outputs
  });
  edb::Trace trace(engine);
  std::function<edb::Expr(int, float)> node = [&](int depth, float seed) -> edb::Expr {
    if (depth == 0) return trace.input({seed, -seed, 0.5f * seed, 1.0f});
    return combine(trace, {node(depth - 1, seed + 1), node(depth - 1, seed - 1)})[1];
  };
  std::vector<edb::Expr> roots;
  for (int i = 0; i < trees; ++i) roots.push_back(node(2 + i % 2, 0.1f * float(i)));
  return edb::sum(roots).value()(0);
}

int main() {
  edb::Model model("cells");
  model.add_parameter("U", 4, 8);
  model.add_parameter("b", 4, 1);
  edb::Engine with_cells;  // EngineOptions::cells is on by default
  edb::EngineOptions no_cells;
  no_cells.cells = false;  // each call records the cell's body inline, node by node
  edb::Engine inline_nodes(no_cells);
  const float a = tree_sum(with_cells, model, 6), b = tree_sum(inline_nodes, model, 6);
  std::printf("%g with cells (%lld batches), %g without (%lld batches)\n", a,
              (long long)with_cells.stats().batches, b, (long long)inline_nodes.stats().batches);
  return std::fabs(a - b) <= 1e-5f * std::fmax(1.0f, std::fabs(b)) ? 0 : 1;
}
