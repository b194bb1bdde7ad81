// The jit executor's own work: compiled cells and fused elementwise kernels (runtime/jit_executor.h).
#include "runtime/jit_executor.h"

#include <algorithm>
#include <bit>
#include <memory>
#include <string>
#include <vector>

#include "edbatch/errors.h"
#include "ir/bounded_cache.h"
#include "jit/cached_compiler.h"
#include "jit/kernel_ir.h"
#include "jit/llvm_backend.h"
#include "runtime/batch_context.h"
#include "runtime/cell_kernels.h"
#include "runtime/side_by_side.h"

namespace edb::runtime {

// The process's cached compiler for the executor's cache directory (shared by every executor with
// that directory, looked up at the first compile), and per executor the kernels it has used, by a
// compact key of op, constant and input access modes: at most EngineOptions::cache_entries, the
// least recently used out first (a kernel evicted here stays in the compiler).
struct JitKernels {
  explicit JitKernels(std::string directory) : cache_directory(std::move(directory)) {}
  jit::CachedCompiler& compiler() {
    if (!shared) shared = &jit::shared_compiler(cache_directory);
    return *shared;
  }
  std::string cache_directory;
  jit::CachedCompiler* shared = nullptr;
  ir::BoundedCache<std::string, jit::CompiledKernel> by_key{1024};
};

// A compiled elementwise group ready to run (prepare_jit_group, below).
struct JitLaunch {
  jit::KernelFunction function = nullptr;
  std::shared_ptr<void> keep_alive;  // the kernel's code, should the cache drop it meanwhile
  std::vector<const float* const*> pointers;  // per input, per member
  std::vector<float*> outputs;                // per batch of the group
  int64_t n = 0, elements = 0;
};

namespace {

constexpr size_t kMaxJitInputs = 8;  // wider sums run on Eigen
constexpr size_t kMaxFused = 16;     // batches in one fused kernel, at most
// A batch of fewer floats runs as a kernel of its own, never fused with its neighbours: such
// batches (a trace's loss terms summed in groups of up to kMaxJitInputs, a handful of scalars) come
// next to ever new neighbours, and a fused kernel is keyed by the whole run, so fusing them kept
// compiling new kernels epoch after epoch (a BiLSTM's fourth epoch of training still spent 27-128
// ms of about 600 compiling runs of scalar sums); alone, each op and arity is one kernel. They
// stay compiled (not Eigen's) so that their values equal a compiled cell's bit for bit.
constexpr int64_t kMinFusedFloats = 256;

// The kernel op of an elementwise batch the JIT runs; false for others (and for wide sums, a
// trace's losses, where each arity would be a kernel of its own).
bool jit_op_of(const ir::Node& node, jit::KernelOp& op) {
  if (jit::is_activation_gradient(node.op)) {
    op = jit::KernelOp::cmult;  // built from kernel ops by activation_gradient()
    return true;
  }
  return jit::kernel_op_for(node.op, op) && node.arg_count <= kMaxJitInputs;
}

// tanh_grad and sigmoid_grad (y, dy) as kernel instructions, so backward chains fuse like forward ones.
jit::ValueId activation_gradient(jit::Kernel& kernel, ir::Op op, jit::ValueId y, jit::ValueId dy) {
  return jit::activation_gradient(op, y, dy, [&](jit::KernelOp k, jit::ValueId a, jit::ValueId b, float constant) {
    return jit::kernel_op_has_constant(k) ? kernel.with_constant(k, a, constant) : kernel.binary(k, a, b);
  });
}

// Consecutive elementwise batches (one or more, same members count and output size) as one
// compiled kernel over the members: an operand that is an earlier batch's output for the same
// member is that value in a register, every other operand is loaded through per-member pointers
// (one kernel then serves every mix of shared, strided and gathered operands), and every batch's
// output is stored. The kernel is keyed by the group's structure and compiled once per process.
// Precondition: fusable_end() accepted the group.
//
// In two halves, so that a group prepared on the executor's thread may run on another
// (runtime/side_by_side.h): prepare_jit_group builds the kernel's description and its operands'
// tables (in the lead's scratch) and looks the kernel up, compiling it where needed;
// launch_jit_group runs it over the lead's pool.
JitLaunch prepare_jit_group(std::span<const BatchContext> group, JitKernels& kernels) {
  const BatchContext& lead = group[0];
  const int64_t n = lead.n(), elements = lead.first.shape.size();
  jit::Kernel kernel;
  std::string key;
  std::vector<const float* const*> pointers;
  std::vector<jit::ValueId> value_of;
  for (const BatchContext& c : group) {
    jit::KernelOp op;
    jit_op_of(c.first, op);
    key += std::string(ir::op_name(c.first.op)) + '/' + std::to_string(c.first.arg_count) + '(';
    std::vector<jit::ValueId> args;
    for (size_t slot = 0; slot < c.first.arg_count; ++slot) {
      const float* p = c.in(0, slot);
      size_t from = 0;
      while (from < value_of.size() && (p < group[from].out || p >= group[from].out + n * elements)) ++from;
      if (from < value_of.size()) {  // an earlier batch's output, member for member
        args.push_back(value_of[from]);
        key += 'v' + std::to_string(from) + ' ';
        continue;
      }
      const Operand o = c.operand(slot);
      c.count_alone(o, 0, n);
      if (o.kind == Operand::kGathered) {
        pointers.push_back(o.pointers);
      } else {
        const float** own = c.scratch.allocate_pointers(size_t(n));
        for (int64_t k = 0; k < n; ++k) own[k] = o.member(k);
        pointers.push_back(own);
      }
      kernel.inputs.push_back(jit::OperandAccess::gathered);
      args.push_back(kernel.load(int32_t(kernel.inputs.size() - 1)));
      key += "in ";
    }
    jit::ValueId value = args[0];
    if (jit::is_activation_gradient(c.first.op)) {
      value = activation_gradient(kernel, c.first.op, args[0], args[1]);
    } else if (jit::kernel_op_has_constant(op)) {
      value = kernel.with_constant(op, value, c.first.attrs.constant);
      key += std::to_string(std::bit_cast<uint32_t>(c.first.attrs.constant));
    } else if (jit::kernel_op_arity(op) == 1) {
      value = kernel.unary(op, value);
    } else {
      for (size_t i = 1; i < args.size(); ++i) value = kernel.binary(op, value, args[i]);
    }
    key += ");";
    value_of.push_back(value);
    kernel.store(value);
  }
  kernel.name = group.size() == 1 ? std::string(ir::op_name(lead.first.op)) : "fused " + std::to_string(group.size());
  const jit::CompiledKernel* found = kernels.by_key.find(key);
  if (!found) {
    bool compiled_now = false;
    jit::CompiledKernel made = kernels.compiler().get(kernel, compiled_now);  // throws: nothing kept
    if (compiled_now) {
      lead.stats.kernels_compiled += 1;
      lead.stats.time.compile_ms += made.compile_ms;
    } else {
      lead.stats.cache_hits += 1;
    }
    found = kernels.by_key.insert(key, std::move(made));
  }
  JitLaunch launch{found->function, found->keep_alive, std::move(pointers), {}, n, elements};
  for (const BatchContext& c : group) launch.outputs.push_back(c.out);
  return launch;
}

// Runs a prepared group, cut by members across the pool of `lead` (its first batch's context).
void launch_jit_group(const JitLaunch& launch, const BatchContext& lead) {
  const int64_t elements = launch.elements;
  lead.split(launch.n, std::max<int64_t>(1, kMinElementsPerTask / elements), [&](int64_t begin, int64_t end) {
    std::vector<jit::KernelInput> inputs(launch.pointers.size());
    for (size_t i = 0; i < launch.pointers.size(); ++i) inputs[i].pointers = launch.pointers[i] + begin;
    std::vector<float*> outputs;
    for (float* out : launch.outputs) outputs.push_back(out + begin * elements);
    const jit::KernelArgs args{end - begin, elements, inputs.data(), outputs.data()};
    launch.function(&args);
  });
  lead.stats.kernel_calls += 1;
}

void run_jit_group(std::span<const BatchContext> group, JitKernels& kernels) {
  launch_jit_group(prepare_jit_group(group, kernels), group[0]);
}

// Where the group of JIT batches starting at `b` ends: the next batch joins while it is an
// elementwise batch with as many members and the same output size, and every operand it reads
// from the group's outputs is the output of its own member (members run one after another).
size_t fusable_end(const scheduler::Schedule& schedule, const Values& values, size_t b) {
  const auto lead = schedule.batch(b);
  const ir::Node& first = values.graph.node(lead[0]);
  jit::KernelOp op;
  if (ir::is_node_batch(first)) {  // runs alone: its members are read through its table (ir::NodeBatch)
    ir::Node member = first;
    member.arg_count /= uint32_t(first.attrs.members);
    return jit_op_of(member, op) ? b + 1 : b;
  }
  if (!jit_op_of(first, op)) return b;
  const int64_t n = int64_t(lead.size()), elements = first.shape.size();
  if (n * elements < kMinFusedFloats) return b + 1;
  std::vector<const float*> outs{values.in(lead[0])};
  size_t end = b + 1;
  for (; end < schedule.batch_count() && end - b < kMaxFused; ++end) {
    const auto members = schedule.batch(end);
    const ir::Node& node = values.graph.node(members[0]);
    if (int64_t(members.size()) != n || values.plan.is_view(members[0]) || !jit_op_of(node, op) ||
        node.shape.size() != elements || ir::is_node_batch(node))
      break;
    // Per slot: no member reads a group output (a plain input), or every member reads its own
    // member's output of one batch (a register). Anything else would read what the kernel has not
    // stored yet, and would break the kernel's rule that outputs alias no input.
    bool aligned = true;
    for (size_t slot = 0; slot < node.arg_count && aligned; ++slot) {
      int64_t inside = 0;
      size_t region = outs.size();
      for (int64_t k = 0; k < n && aligned; ++k) {
        const float* p = values.in(values.graph.args(members[size_t(k)])[slot]);
        for (size_t r = 0; r < outs.size(); ++r) {
          if (p < outs[r] || p >= outs[r] + n * elements) continue;
          aligned = p == outs[r] + k * elements && (region == outs.size() || region == r);
          region = r;
          ++inside;
        }
      }
      aligned = aligned && (inside == 0 || inside == n);
    }
    if (!aligned) break;
    outs.push_back(values.in(members[0]));
  }
  return end;
}
}  // namespace

JitExecutor::JitExecutor(int threads, std::string cache_directory)
    : BatchedExecutor(threads),
      kernels_(std::make_unique<JitKernels>(cache_directory)),
      cells_(std::make_unique<CellKernels>(std::move(cache_directory))) {}

JitExecutor::~JitExecutor() = default;

void JitExecutor::set_cache_entries(size_t entries) {
  BatchedExecutor::set_cache_entries(entries);
  kernels_->by_key.set_limits(std::max<size_t>(entries, 1));
  cells_->set_capacity(entries);
}

void JitExecutor::forget_cells() {
  BatchedExecutor::forget_cells();
  cells_->clear();
}

void JitExecutor::cache_sizes(CacheSizes& sizes) const {
  BatchedExecutor::cache_sizes(sizes);
  sizes.cell_kernels = cells_->sizes();
  sizes.jit_kernels = kernels_->by_key.sizes();
}

namespace {
// Whether a batch of calls led by `first` runs as one compiled kernel: its cell lowers. A batch call
// (ir::CallBatch) is one node even node by node, and only ever of a cell that lowers.
bool compiled_calls(const scheduler::Schedule& schedule, const Values& values, const ir::Node& first) {
  return (!schedule.node_by_node || ir::is_call_batch(first)) &&
         static_cast<const CallCell&>(values.graph.cell(first.attrs.index)).lowered;
}
}  // namespace

// A batch beside others as the jit runs it: calls of a cell that lowers as the cell's kernel, an
// elementwise batch as a compiled group of one, the rest as batched runs it.
enum class JitExecutor::Beside { cells, group, batched };

JitExecutor::Beside JitExecutor::beside_kind(const scheduler::Schedule& schedule, const Values& values, size_t b) const {
  const ir::Node& first = values.graph.node(schedule.batch(b)[0]);
  if (first.op == ir::Op::call) return Beside::cells;
  jit::KernelOp op;
  return !ir::is_node_batch(first) && jit_op_of(first, op) ? Beside::group : Beside::batched;
}

bool JitExecutor::runs_beside(const scheduler::Schedule& schedule, const Values& values, size_t b) const {
  if (values.plan.is_view(schedule.batch(b)[0])) return true;
  switch (beside_kind(schedule, values, b)) {
    case Beside::cells: return compiled_calls(schedule, values, values.graph.node(schedule.batch(b)[0]));
    // An elementwise batch that would fuse with the next runs alone, as their one kernel.
    case Beside::group: return fusable_end(schedule, values, b) == b + 1;
    case Beside::batched: break;
  }
  return BatchedExecutor::runs_beside(schedule, values, b);
}

void JitExecutor::prepare_beside(const scheduler::Schedule& schedule, const Values& values, size_t b, size_t k,
                                 Lane& lane, Stats& stats) {
  const std::span<const ir::NodeId> batch = schedule.batch(b);
  switch (beside_kind(schedule, values, b)) {
    case Beside::cells: cells_->prepare(batch, values, pool(), stats, k); break;
    case Beside::group: {
      if (groups_.size() <= k) groups_.resize(k + 1);
      const BatchContext c = lane_context(schedule, values, b, lane);
      groups_[k] = std::make_unique<JitLaunch>(prepare_jit_group(std::span(&c, 1), *kernels_));
      break;
    }
    case Beside::batched: break;
  }
}

void JitExecutor::run_beside(const scheduler::Schedule& schedule, const Values& values, size_t b, size_t k, Lane& lane) {
  switch (beside_kind(schedule, values, b)) {
    case Beside::cells: cells_->launch(k, lane.pool, lane.stats); break;
    case Beside::group: launch_jit_group(*groups_[k], lane_context(schedule, values, b, lane)); break;
    case Beside::batched: BatchedExecutor::run_beside(schedule, values, b, k, lane); break;
  }
}

size_t JitExecutor::run_compiled(const scheduler::Schedule& schedule, const Values& values, size_t b, Stats& stats) {
  const std::span<const ir::NodeId> batch = schedule.batch(b);
  if (values.plan.is_view(batch[0])) return b;
  // A batch of call nodes as one compiled kernel, where the cell lowers.
  if (const ir::Node& first = values.graph.node(batch[0]); first.op == ir::Op::call) {
    if (!compiled_calls(schedule, values, first)) return b;
    cells_->run_calls(batch, values, pool(), stats);
    return b + 1;
  }
  // A run of elementwise batches as one kernel.
  const size_t end = fusable_end(schedule, values, b);
  if (end == b) return b;
  scratch().reset();
  std::vector<BatchContext> group;
  for (size_t g = b; g < end; ++g) group.push_back(context(schedule, values, g, stats));
  run_jit_group(group, *kernels_);
  return end;
}

}  // namespace edb::runtime
