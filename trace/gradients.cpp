// The gradients of a trace's backward pass, read out once it has run (Trace::gradients), and
// Gradients' own functions.
#include <algorithm>
#include <array>

#include "trace/state.h"

namespace edb {

using ir::NodeId;
using ir::Op;

namespace {

// A lookup's read of its gradient as one sortable number: table and entry in the high word (the
// entry in the low kEntryBits), the gradient node and row in the low word.
using Key = unsigned __int128;
constexpr int kEntryBits = 40;

// Sorts `keys` ascending, a byte at a time from the lowest (a stable counting pass each), skipping
// the bytes every key shares: a step's lookups differ in a few bytes of entry, node and row, so a
// few linear passes replace a comparison sort whose branches a random order mispredicts.
void radix_sort(std::vector<Key>& keys) {
  Key all_ones = ~Key{0}, any_one = 0;
  for (const Key k : keys) {
    all_ones &= k;
    any_one |= k;
  }
  const Key varying = all_ones ^ any_one;
  std::vector<Key> other(keys.size());
  for (int shift = 0; shift < 128; shift += 8) {
    if (uint8_t(varying >> shift) == 0) continue;
    std::array<size_t, 257> start{};
    for (const Key k : keys) ++start[size_t(uint8_t(k >> shift)) + 1];
    for (size_t d = 1; d < start.size(); ++d) start[d] += start[d - 1];
    for (const Key k : keys) other[start[uint8_t(k >> shift)]++] = k;
    keys.swap(other);
  }
}

// Row `g` (dim floats) of `entry`, after rows in ascending order of entry: added to the last row
// when it is the same entry, else appended.
void add_row(std::vector<int64_t>& entries, std::vector<float>& gradients, int64_t entry, const float* g, size_t dim) {
  if (!entries.empty() && entries.back() == entry) {
    float* sum = gradients.data() + gradients.size() - dim;
    for (size_t k = 0; k < dim; ++k) sum[k] += g[k];
    return;
  }
  entries.push_back(entry);
  gradients.insert(gradients.end(), g, g + dim);
}

// Node id's value into `tensor`, whose storage is reused.
void copy_into(Tensor& tensor, const runtime::Values& values, const ir::Graph& graph, NodeId id) {
  const ir::Shape shape = graph.node(id).shape;
  const float* v = values.in(id);
  tensor.rows = shape.rows;
  tensor.cols = shape.cols;
  tensor.data.assign(v, v + shape.size());
}

}  // namespace

void Trace::gradients(Gradients& out) {
  if (!active()) throw UsageError("edb::Trace::gradients(): the trace has finished (or its Engine was destroyed)");
  detail::TraceState& s = *state_;
  if (s.backward_loss == ir::kNoNode)
    throw UsageError("edb::Trace::gradients(): this trace has no backward pass; record one with record_backward(loss)");
  if (s.data.evaluated < s.data.graph.size()) s.engine->driver.submit(s.data);
  s.engine->driver.wait(s.data);
  const runtime::Values values = s.data.values();
  const ir::Graph& graph = s.data.graph;
  const std::vector<detail::LeafGradient>& leaves = s.backward_leaves;
  const NodeId loss = s.backward_loss;

  out.loss = values.in(loss)[0];
  // The previous gradients' storage, taken over by the same parameter's or table's new gradient.
  std::vector<Gradients::Dense> old_parameters = std::move(out.parameters);
  std::vector<Gradients::Rows> old_tables = std::move(out.tables);
  out.parameters.clear();
  out.tables.clear();
  // Lookups of one entry (a word read twice) add up; entries come out ascending per table, an
  // entry's rows in the order of their gradient node and row.
  struct Read {
    uint32_t table;  // the graph's parameter index
    int64_t entry;
    NodeId gradient;
    int32_t row;
  };
  std::vector<Read> reads;
  bool packs = true;  // every read fits a Key (below)
  for (const auto& [leaf, gradient, row] : leaves) {
    const ir::Node& node = graph.node(leaf);
    if (node.op == Op::lookup) {
      const uint32_t table = node.attrs.parameter;
      const int64_t entry = node.attrs.index;
      packs = packs && table < (uint32_t{1} << (64 - kEntryBits)) && entry >= 0 && entry < (int64_t{1} << kEntryBits) &&
              row >= 0;
      reads.push_back({table, entry, gradient, row});
      continue;
    }
    const auto [model, index] = detail::find_parameter(graph.parameter(node.attrs.parameter).uid);
    if (!model) throw UsageError("edb::Trace::backward(): a parameter's Model was destroyed during the trace");
    // A trace holds one node per parameter; were there two, their gradients add up all the same.
    const Parameter parameter(model, index);
    if (Tensor* seen = const_cast<Tensor*>(out.of(parameter))) {
      const float* g = values.in(gradient);
      for (size_t k = 0; k < seen->data.size(); ++k) seen->data[k] += g[k];
      continue;
    }
    Gradients::Dense& dense = out.parameters.emplace_back(Gradients::Dense{parameter, {}});
    for (Gradients::Dense& old : old_parameters)
      if (old.parameter == parameter) {
        dense.gradient = std::move(old.gradient);
        break;
      }
    copy_into(dense.gradient, values, graph, gradient);
  }
  if (packs) {
    // As 128-bit keys, table and entry above, gradient node and row below, sorted by their bytes
    // (the tuples' comparison sort was a third of a BiLSTM step's reading out). Any table that
    // memory can hold packs.
    std::vector<Key> keys;
    keys.reserve(reads.size());
    for (const Read& r : reads)
      keys.push_back(Key((uint64_t{r.table} << kEntryBits) | uint64_t(r.entry)) << 64 |
                     ((uint64_t{r.gradient} << 32) | uint32_t(r.row)));
    radix_sort(keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint64_t high = uint64_t(keys[i] >> 64), low = uint64_t(keys[i]);
      reads[i] = {uint32_t(high >> kEntryBits), int64_t(high & ((uint64_t{1} << kEntryBits) - 1)), NodeId(low >> 32),
                  int32_t(uint32_t(low))};
    }
  } else {
    std::sort(reads.begin(), reads.end(), [](const Read& x, const Read& y) {
      return std::tie(x.table, x.entry, x.gradient, x.row) < std::tie(y.table, y.entry, y.gradient, y.row);
    });
  }
  for (size_t i = 0; i < reads.size();) {
    const auto [model, index] = detail::find_parameter(graph.parameter(reads[i].table).uid);
    if (!model) throw UsageError("edb::Trace::backward(): a lookup table's Model was destroyed during the trace");
    Gradients::Rows& r = out.tables.emplace_back(Gradients::Rows{LookupTable(model, index), {}, {}});
    for (Gradients::Rows& old : old_tables)
      if (old.table == r.table) {
        r.entries = std::move(old.entries);
        r.gradients = std::move(old.gradients);
        r.entries.clear();
        r.gradients.clear();
        break;
      }
    const size_t dim = size_t(graph.parameter(reads[i].table).shape.rows);
    // In entry order the rows lie all over the arena: each is fetched a few reads ahead (the
    // waits on them were nearly all of this loop's time).
    constexpr size_t kAhead = 4;
    auto row_of = [&](size_t k) { return values.in(reads[k].gradient) + reads[k].row; };
    for (const uint32_t table = reads[i].table; i < reads.size() && reads[i].table == table; ++i) {
      if (i + kAhead < reads.size())
        for (const float *p = row_of(i + kAhead), *end = p + dim; p < end; p += 64 / sizeof(float)) __builtin_prefetch(p);
      add_row(r.entries, r.gradients, reads[i].entry, row_of(i), dim);
    }
  }
}

const Tensor* Gradients::of(const Parameter& parameter) const {
  for (const Dense& d : parameters)
    if (d.parameter == parameter) return &d.gradient;
  return nullptr;
}

const Gradients::Rows* Gradients::of(const LookupTable& table) const {
  for (const Rows& r : tables)
    if (r.table == table) return &r;
  return nullptr;
}

void Gradients::add(const Gradients& other) {
  loss += other.loss;
  for (const Dense& d : other.parameters) {
    Tensor* mine = const_cast<Tensor*>(of(d.parameter));
    if (!mine) {
      parameters.push_back(d);
      continue;
    }
    if (mine->data.size() != d.gradient.data.size())
      throw UsageError("edb::Gradients::add(): gradients of '" + d.parameter.name() + "' differ in shape");
    for (size_t i = 0; i < mine->data.size(); ++i) mine->data[i] += d.gradient.data[i];
  }
  for (const Rows& r : other.tables) {
    Rows* mine = const_cast<Rows*>(of(r.table));
    if (!mine) {
      tables.push_back(r);
      continue;
    }
    const size_t dim = size_t(r.table.dim());
    for (const Rows* source : {static_cast<const Rows*>(mine), &r})
      if (source->gradients.size() != source->entries.size() * dim)
        throw UsageError("edb::Gradients::add(): the rows of '" + r.table.name() + "' hold " +
                         std::to_string(source->gradients.size()) + " floats for " + std::to_string(source->entries.size()) +
                         " entries of " + std::to_string(dim));
    // Both sides' rows sorted by entry (stably: this side's before the other's, each side's in its
    // own order), then summed per entry; rows a caller filled in any order add up the same way.
    std::vector<std::pair<int64_t, const float*>> rows;
    rows.reserve(mine->entries.size() + r.entries.size());
    for (const Rows* source : {static_cast<const Rows*>(mine), &r})
      for (size_t i = 0; i < source->entries.size(); ++i)
        rows.emplace_back(source->entries[i], source->gradients.data() + i * dim);
    std::stable_sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<int64_t> entries;
    std::vector<float> gradients;
    gradients.reserve(rows.size() * dim);
    for (const auto& [entry, g] : rows) add_row(entries, gradients, entry, g, dim);
    mine->entries = std::move(entries);
    mine->gradients = std::move(gradients);
  }
}

}  // namespace edb
