// reshape: the same values as another shape; a view in the plan (no copy) wherever its argument
// lives in the arena, a copy otherwise; its signature includes the target shape.
#include <gtest/gtest.h>

#include <edbatch/edbatch.h>

#include "ir/signature.h"

namespace edb {
namespace {

EngineOptions with(const char* policy, const char* executor) {
  EngineOptions o;
  o.policy = policy;
  o.executor = executor;
  o.verify = true;  // also checks that each view lies where its argument says
  return o;
}

TEST(Reshape, SameValuesAsAMatrixOnEveryExecutor) {
  for (const auto& options : {with("sequential", "reference"), with("greedy", "batched")}) {
    Model model("m", 2);
    const LookupTable table = model.add_lookup("M", 5, 6);
    Engine engine(options);
    Trace trace(engine);
    std::vector<Expr> products;
    const Expr v = trace.input({1.0f, 2.0f, 3.0f});
    for (int word : {0, 3, 4}) {
      const Expr matrix = reshape(trace.lookup(table, word), 2, 3);  // a view of the lookup
      EXPECT_EQ(matrix.rows(), 2);
      products.push_back(matvec(matrix, v));
    }
    const Expr leaf = reshape(trace.input({1, 2, 3, 4, 5, 6}), 3, 2);  // of a leaf: copied
    for (size_t i = 0; i < products.size(); ++i) {
      const int word = i == 0 ? 0 : i == 1 ? 3 : 4;
      const Tensor t = products[i].value();
      const float* m = table.values().data() + word * 6;
      for (int r = 0; r < 2; ++r)
        EXPECT_FLOAT_EQ(t(r), m[r] * 1 + m[2 + r] * 2 + m[4 + r] * 3) << options.executor << " word " << word;
    }
    const Tensor l = leaf.value();
    EXPECT_EQ(l.rows, 3);
    EXPECT_EQ(l.cols, 2);
    EXPECT_EQ(l.data, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  }
}

TEST(Reshape, TargetShapeIsPartOfTheSignature) {
  Engine engine(with("greedy", "batched"));
  Trace trace(engine);
  const Expr x = trace.input(std::vector<float>(12, 1.0f));
  tanh(reshape(x, 3, 4));
  tanh(reshape(x, 4, 3));
  tanh(reshape(x, 3, 4));
  trace.run();
  // Two reshape types and two tanh types: four batches.
  EXPECT_EQ(engine.stats().batches, 4);
}

}  // namespace
}  // namespace edb
