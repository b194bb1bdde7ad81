// OuterProducts (a weight's gradient over its uses, read through pointers) against sums in double,
// under the micro-kernel of every ISA this CPU runs; matmul_nt_rows, the product over columns read
// at rows of other values, under the executors.
#include "runtime/outer_products.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "edbatch/errors.h"
#include "edbatch/stats.h"
#include "ir/ir.h"
#include "ir/isa.h"
#include "ir/signature.h"
#include "memplan/plan.h"
#include "runtime/batched.h"
#include "runtime/executor.h"
#include "runtime/outer_kernel.h"
#include "scheduler/schedule.h"
#include "tests/support/rng.h"

namespace edb::runtime {
namespace {

struct Case {
  int64_t rows, cols, count;
};

// Every edge of the blocking (tiles of 32x12, 16x6 and 8x6, and the edge tiles of one vector of
// rows and of 4 or 8 columns, filled exactly or in part): partial row and column tiles, one
// column, a panel's depth exactly, one past it and several panels.
// Narrow products take the other paths: few columns (a bias's (dy, 1)), few rows (a classifier),
// both; by blocks of rows in registers and by columns past them.
const Case kCases[] = {{16, 6, 1},    {32, 12, 256},  {33, 13, 257}, {70, 30, 600}, {640, 256, 300},
                       {31, 11, 5},   {128, 128, 512}, {17, 100, 3},  {384, 7, 1000}, {200, 1, 1231},
                       {200, 5, 40},  {5, 128, 300},   {15, 6, 20},   {3, 2, 10},     {1, 1, 7},
                       {8, 6, 9},     {9, 7, 13},     {24, 18, 33},  {48, 13, 70},  {4, 3, 5},
                       {16, 4, 9},    {40, 20, 11},   {64, 8, 17},   {200, 50, 65},  {12, 40, 9},  {7, 70, 11}};

std::vector<std::string> host_isas() {
  std::vector<std::string> names;
  for (ir::Isa isa : {ir::Isa::generic, ir::Isa::avx2, ir::Isa::avx512})
    if (isa <= ir::host_isa()) names.push_back(ir::isa_name(isa));
  return names;
}

class OuterProductsTest : public ::testing::TestWithParam<std::tuple<Case, std::string>> {};

TEST_P(OuterProductsTest, EqualSumsInDoubleForEveryTileEdge) {
  const Case c = std::get<0>(GetParam());
  const OuterKernel& kernel = OuterProducts::kernel_for(std::get<1>(GetParam()).c_str());
  testing::Rng rng(uint64_t(c.rows * 1000003 + c.cols * 1009 + c.count));
  // Columns scattered in one pool, in no order, as a trace's frames leave them.
  std::vector<float> pool(size_t((c.rows + c.cols + 3) * c.count));
  for (float& v : pool) v = float(2 * rng.unit() - 1);
  std::vector<const float*> a, b;
  for (int64_t k = 0; k < c.count; ++k) {
    const int64_t at = (k * 7919) % c.count;  // a permutation: count is no multiple of 7919
    a.push_back(pool.data() + at * (c.rows + c.cols + 3));
    b.push_back(pool.data() + at * (c.rows + c.cols + 3) + c.rows + 1);
  }
  const OuterProducts products{c.rows, c.cols, a, b, &kernel};
  std::vector<float> panels(size_t(products.scratch_floats()) + 1);
  std::vector<float> out(size_t(c.rows * c.cols), 12345.0f);  // overwritten, not added to
  products.compute(out.data(), panels.data(), [&](int64_t tiles, const std::function<void(int64_t, int64_t)>& body) {
    // Uneven pieces, last to first, as threads might take them.
    for (int64_t end = tiles; end > 0;) {
      const int64_t begin = std::max<int64_t>(0, end - 1 - (end % 3));
      body(begin, end);
      end = begin;
    }
  });
  for (int64_t j = 0; j < c.cols; ++j)
    for (int64_t i = 0; i < c.rows; ++i) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < c.count; ++k) {
        sum += double(a[size_t(k)][i]) * b[size_t(k)][j];
        magnitude += std::abs(double(a[size_t(k)][i]) * b[size_t(k)][j]);
      }
      ASSERT_NEAR(out[size_t(j * c.rows + i)], sum, 1e-5 * magnitude + 1e-6)
          << "element (" << i << ", " << j << ") of " << c.rows << "x" << c.cols << " over " << c.count;
    }
}

// The same product run as its panels of uses one after another, the first by compute() and the
// rest by accumulate() (a weight gradient's blocks run ahead on waiting threads), is compute()'s
// bit for bit: the blocks are its panels.
TEST_P(OuterProductsTest, BlocksOfUsesAddUpToTheWholeBitForBit) {
  const Case c = std::get<0>(GetParam());
  const OuterKernel& kernel = OuterProducts::kernel_for(std::get<1>(GetParam()).c_str());
  testing::Rng rng(uint64_t(c.rows * 7 + c.cols * 131 + c.count));
  std::vector<float> pool(size_t((c.rows + c.cols) * c.count));
  for (float& v : pool) v = float(2 * rng.unit() - 1);
  std::vector<const float*> a, b;
  for (int64_t k = 0; k < c.count; ++k) {
    a.push_back(pool.data() + k * (c.rows + c.cols));
    b.push_back(pool.data() + k * (c.rows + c.cols) + c.rows);
  }
  const OuterProducts whole{c.rows, c.cols, a, b, &kernel};
  if (!whole.adds_by_blocks()) {
    std::vector<float> out(size_t(c.rows * c.cols)), panels(size_t(whole.scratch_floats()) + 1);
    EXPECT_THROW(whole.accumulate(out.data(), panels.data(), [](int64_t, const std::function<void(int64_t, int64_t)>&) {}),
                 InternalError);
    return;
  }
  const auto in_one = [](int64_t tiles, const std::function<void(int64_t, int64_t)>& body) { body(0, tiles); };
  std::vector<float> expected(size_t(c.rows * c.cols)), actual(size_t(c.rows * c.cols), 7.0f);
  std::vector<float> panels(size_t(whole.scratch_floats()) + 1);
  whole.compute(expected.data(), panels.data(), in_one);
  const int64_t depth = whole.depth();
  for (int64_t begin = 0; begin < c.count; begin += depth) {
    const size_t count = size_t(std::min(depth, c.count - begin));
    const OuterProducts block{c.rows, c.cols, std::span(a).subspan(size_t(begin), count),
                              std::span(b).subspan(size_t(begin), count), &kernel};
    EXPECT_EQ(block.depth(), int64_t(count));
    if (begin == 0) block.compute(actual.data(), panels.data(), in_one);
    else block.accumulate(actual.data(), panels.data(), in_one);
  }
  for (size_t e = 0; e < expected.size(); ++e)
    ASSERT_EQ(actual[e], expected[e]) << "element " << e << " of " << c.rows << "x" << c.cols << " over " << c.count;
}

INSTANTIATE_TEST_SUITE_P(Shapes, OuterProductsTest, ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(host_isas())),
                         [](const auto& info) {
                           const Case c = std::get<0>(info.param);
                           return std::get<1>(info.param) + "_" + std::to_string(c.rows) + "x" + std::to_string(c.cols) + "x" +
                                  std::to_string(c.count);
                         });

// A GEMM on a weight packed once (OuterKernel::pack_a, Gemm::packed_a) gives what packing it per
// call gives, bit for bit, for the weight and its transpose, over several depth blocks and partial
// tiles, under every ISA this CPU runs.
TEST(OuterProducts, APackedWeightMultipliesAsThePerCallPacking) {
  for (const std::string& isa : host_isas())
    for (bool transposed : {false, true}) {
      SCOPED_TRACE(isa + (transposed ? " transposed" : ""));
      const OuterKernel& kernel = OuterProducts::kernel_for(isa.c_str());
      const int64_t rows = 70, cols = 600, n = 37;  // W is rows x cols: three depth blocks untransposed
      testing::Rng rng(7);
      std::vector<float> w(size_t(rows * cols)), x(size_t((transposed ? rows : cols) * n));
      for (float& v : w) v = float(2 * rng.unit() - 1);
      for (float& v : x) v = float(2 * rng.unit() - 1);
      Gemm p;
      p.m = transposed ? cols : rows;
      p.depth = transposed ? rows : cols;
      p.n = n;
      p.a = w.data();
      std::tie(p.a_row, p.a_col) = transposed ? std::pair<int64_t, int64_t>{rows, 1} : std::pair<int64_t, int64_t>{1, rows};
      p.b = x.data();
      p.b_row = 1;
      p.b_col = p.depth;
      std::vector<float> panels(size_t(gemm_panel_floats(kernel, p.m, p.n)));
      std::vector<float> want(size_t(p.m * n), 0.5f), got = want;
      p.c = want.data();
      p.ldc = p.m;
      kernel.gemm(p, panels.data());
      std::vector<float> packed(size_t(packed_a_floats(kernel, p.m, p.depth)));
      kernel.pack_a(p, packed.data());
      p.c = got.data();
      p.packed_a = packed.data();
      kernel.gemm(p, panels.data());
      ASSERT_EQ(got, want);
    }
}

// runtime::gemm keeps a parameter's packing until its version moves, and never keeps one whose
// values may be written without moving it.
TEST(OuterProducts, AKeptWeightIsRepackedWhenItsVersionMoves) {
  const int64_t rows = 40, cols = 30, n = 5;
  std::vector<float> w(size_t(rows * cols), 1.0f), x(size_t(cols * n), 1.0f);
  uint64_t version = 1;
  bool written = false;
  ir::ParameterInfo info;
  info.uid = 987654321;
  info.shape = {int32_t(rows), int32_t(cols)};
  info.data = w.data();
  info.version = &version;
  info.written_unversioned = &written;
  auto product = [&] {
    std::vector<float> out(size_t(rows * n), 0.0f);
    Gemm p;
    p.m = rows;
    p.depth = cols;
    p.n = n;
    p.a = w.data();
    p.a_row = 1;
    p.a_col = rows;
    p.b = x.data();
    p.b_row = 1;
    p.b_col = cols;
    p.c = out.data();
    p.ldc = rows;
    gemm(p, &info);
    return out[0];
  };
  EXPECT_EQ(product(), float(cols));
  std::fill(w.begin(), w.end(), 2.0f);
  ++version;
  EXPECT_EQ(product(), float(2 * cols)) << "the version moved: packed again";
  std::fill(w.begin(), w.end(), 3.0f);
  written = true;  // written through a span, the version unmoved
  EXPECT_EQ(product(), float(3 * cols)) << "a weight written without a version is packed per call";
}

// Each ISA's tile fills its register file: two vectors a column, and as many columns as leave four
// registers (the two row vectors, a broadcast, a spare), at most 12.
TEST(OuterProducts, TilesComeFromTheRegisters) {
  for (const std::string& name : host_isas()) {
    const ir::Isa isa = *ir::parse_isa(name);
    const OuterKernel& kernel = OuterProducts::kernel_for(name.c_str());
    EXPECT_EQ(kernel.rows, 2 * ir::vector_floats(isa)) << name;
    EXPECT_EQ(kernel.cols, std::min(12, (ir::vector_registers(isa) - 4) / 2)) << name;
  }
  EXPECT_EQ(OuterProducts::selected_kernel().rows, 2 * ir::vector_floats(ir::selected_isa()));
  EXPECT_THROW(OuterProducts::kernel_for("sse9"), UsageError);
}

// Panels are as deep as the columns a product has: one outer product (an MV-RNN word matrix's
// gradient, batched by the thousand) takes one column of each panel, not OuterProducts::kDepth.
TEST(OuterProducts, ScratchIsAsDeepAsTheColumns) {
  std::vector<float> column(128, 1.0f);
  const float* one[] = {column.data()};
  const int64_t tile_rows = OuterProducts::tile_rows(), tile_cols = OuterProducts::tile_cols();
  const int64_t panel_rows = (128 + tile_rows - 1) / tile_rows * tile_rows + (128 + tile_cols - 1) / tile_cols * tile_cols;
  EXPECT_EQ((OuterProducts{128, 128, std::span(one, 1), std::span(one, 1)}.scratch_floats()), panel_rows);
  std::vector<const float*> many(1000, column.data());
  EXPECT_EQ((OuterProducts{128, 128, many, many}.scratch_floats()), panel_rows * OuterProducts::kDepth);
}

// A wide product's panels hold fewer columns, so that both stay within kPanelBytes.
TEST(OuterProducts, WidePanelsStayWithinTheirBytes) {
  std::vector<float> column(640, 1.0f);
  std::vector<const float*> many(1000, column.data());
  const OuterProducts wide{640, 256, many, many};
  const int64_t tile_rows = OuterProducts::tile_rows(), tile_cols = OuterProducts::tile_cols();
  const int64_t column_bytes =
      ((640 + tile_rows - 1) / tile_rows * tile_rows + (256 + tile_cols - 1) / tile_cols * tile_cols) * int64_t(sizeof(float));
  EXPECT_LT(wide.depth(), OuterProducts::kDepth);
  EXPECT_LE(wide.depth() * column_bytes, OuterProducts::kPanelBytes);
  EXPECT_GT((wide.depth() + 1) * column_bytes, OuterProducts::kPanelBytes);
  EXPECT_EQ(wide.scratch_floats() * int64_t(sizeof(float)), wide.depth() * column_bytes);
}

}  // namespace
}  // namespace edb::runtime

namespace edb::runtime {
namespace {

// The GEMM over strided operands (the batched executor's products) against sums in double, under
// every ISA's kernel: a plain or transposed left factor, a block of a wider right factor, an output
// block with a longer leading dimension, and sizes across the depth and column blockings.
struct GemmCase {
  int64_t m, n, depth;
  bool a_transposed;
};

const GemmCase kGemmCases[] = {{1, 1, 1, false},     {16, 6, 3, false},    {33, 13, 5, true},    {384, 600, 128, false},
                               {200, 481, 257, true}, {17, 1000, 50, false}, {130, 7, 600, true}, {5, 3, 2, true}};

class GemmTest : public ::testing::TestWithParam<std::tuple<GemmCase, std::string>> {};

TEST_P(GemmTest, EqualsSumsInDouble) {
  const GemmCase g = std::get<0>(GetParam());
  const OuterKernel& kernel = OuterProducts::kernel_for(std::get<1>(GetParam()).c_str());
  testing::Rng rng(uint64_t(g.m * 7 + g.n * 131 + g.depth));
  const int64_t lda = (g.a_transposed ? g.depth : g.m) + 3, ldb = g.depth + 5, ldc = g.m + 2;
  std::vector<float> a(size_t(lda * (g.a_transposed ? g.m : g.depth))), b(size_t(ldb * (g.n + 1))),
      c(size_t(ldc * g.n));
  for (float& v : a) v = float(2 * rng.unit() - 1);
  for (float& v : b) v = float(2 * rng.unit() - 1);
  for (float& v : c) v = float(2 * rng.unit() - 1);
  const std::vector<float> before = c;
  auto a_at = [&](int64_t i, int64_t k) { return g.a_transposed ? a[size_t(k + i * lda)] : a[size_t(i + k * lda)]; };
  auto b_at = [&](int64_t k, int64_t j) { return b[size_t(2 + k + (j + 1) * ldb)]; };  // a block of b
  Gemm product{g.m, g.n, g.depth};
  product.a = a.data();
  product.a_row = g.a_transposed ? lda : 1;
  product.a_col = g.a_transposed ? 1 : lda;
  product.b = b.data() + 2 + ldb;
  product.b_row = 1;
  product.b_col = ldb;
  product.c = c.data();
  product.ldc = ldc;
  std::vector<float> panels(size_t(gemm_panel_floats(kernel, g.m, g.n)));
  kernel.gemm(product, panels.data());
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < ldc; ++i) {
      const size_t at = size_t(i + j * ldc);
      if (i >= g.m) {
        ASSERT_EQ(c[at], before[at]) << "row " << i << " past the output block, column " << j;
        continue;
      }
      double sum = before[at], magnitude = std::abs(double(before[at]));
      for (int64_t k = 0; k < g.depth; ++k) {
        sum += double(a_at(i, k)) * b_at(k, j);
        magnitude += std::abs(double(a_at(i, k)) * b_at(k, j));
      }
      ASSERT_NEAR(c[at], sum, 1e-5 * magnitude + 1e-6) << "element (" << i << ", " << j << ")";
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmTest, ::testing::Combine(::testing::ValuesIn(kGemmCases), ::testing::ValuesIn(host_isas())),
                         [](const auto& info) {
                           const GemmCase g = std::get<0>(info.param);
                           return std::get<1>(info.param) + "_" + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                                  std::to_string(g.depth) + (g.a_transposed ? "_transposed" : "");
                         });

}  // namespace
}  // namespace edb::runtime

namespace edb::runtime {
namespace {

// matmul_nt_rows (a weight's gradient whose terms are columns at rows of other values, read there
// with no view node) against sums in double, under the reference executor and the batched one at 1
// and 2 threads: two nodes of one signature, batched together, reading other rows each, a factor
// read twice at different rows, and factors at the first and the last rows of their values.
TEST(MatmulNtRows, ReadsEachFactorAtItsRowsUnderEveryExecutor) {
  testing::Rng rng(46);
  ir::Graph graph;
  auto input = [&](int rows) {
    std::vector<float> values(static_cast<size_t>(rows));
    for (float& v : values) v = float(2 * rng.unit() - 1);
    ir::Attributes attrs;
    attrs.index = graph.add_constants(values);
    return graph.add(ir::Op::input, {}, ir::Shape{rows, 1}, attrs);
  };
  const ir::Shape target{4, 3};
  auto product = [&](std::vector<ir::NodeId> args, std::vector<int32_t> rows) {
    std::vector<ir::Shape> shapes;
    for (ir::NodeId a : args) shapes.push_back(graph.node(a).shape);
    ir::Attributes attrs;
    attrs.index = graph.add_rows(rows);
    attrs.target = target;
    return graph.add(ir::Op::matmul_nt_rows, args, ir::infer_shape(ir::Op::matmul_nt_rows, shapes, attrs), attrs);
  };
  std::vector<ir::NodeId> first = {input(10), input(5), input(4), input(3)};
  std::vector<ir::NodeId> second = {input(10), input(5), input(4), input(3)};
  const ir::NodeId p = product({first[0], first[1], first[2], first[3], first[0], first[3]}, {3, 1, 0, 0, 6, 0});
  const ir::NodeId q = product({second[0], second[1], second[2], second[3], second[0], second[3]}, {0, 2, 0, 0, 5, 0});
  EXPECT_NO_THROW(ir::verify(graph));

  auto expected = [&](ir::NodeId id) {
    std::vector<double> out(size_t(target.size()), 0.0);
    const auto args = graph.args(id);
    const auto rows = graph.rows(graph.node(id).attrs.index, args.size());
    for (size_t i = 0; i < args.size(); i += 2)
      for (int32_t c = 0; c < target.cols; ++c)
        for (int32_t r = 0; r < target.rows; ++r)
          out[size_t(r + c * target.rows)] += double(graph.leaf_data(args[i])[rows[i] + r]) *
                                               double(graph.leaf_data(args[i + 1])[rows[i + 1] + c]);
    return out;
  };
  ir::SignatureTable signatures;
  const std::vector<ir::TypeId> types = signatures.assign(graph);
  ASSERT_EQ(types[p], types[q]);  // one signature: the rows are each node's own
  scheduler::ScheduleInput input_graph{graph, types, 0, nullptr, nullptr};
  scheduler::Schedule schedule;
  scheduler::make_policy("greedy")->schedule(input_graph, schedule);
  ASSERT_EQ(schedule.batch_count(), 1u);
  memplan::Plan plan;
  memplan::plan_batch_order(graph, schedule, plan);
  std::vector<std::unique_ptr<Executor>> executors;
  executors.push_back(std::make_unique<ReferenceExecutor>());
  executors.push_back(std::make_unique<BatchedExecutor>(1));
  executors.push_back(std::make_unique<BatchedExecutor>(2));
  for (const std::unique_ptr<Executor>& executor : executors) {
    std::vector<float> arena(size_t(plan.arena_floats), std::nanf(""));
    Stats stats;
    executor->execute(schedule, Values{graph, plan, arena.data()}, stats);
    for (ir::NodeId id : {p, q}) {
      const std::vector<double> want = expected(id);
      for (size_t e = 0; e < want.size(); ++e)
        ASSERT_NEAR(arena[size_t(plan.offset[id]) + e], want[e], 1e-5) << executor->name() << ", node %" << id << " element " << e;
    }
  }
}

}  // namespace
}  // namespace edb::runtime
