// The GPU executor: per batch, a rendered elementwise kernel, the batched GEMM (after the bias is
// copied in by a load-store kernel), the host, or, for a batch of cell calls, one kernel rendered
// from the cell's program (a cell that lowers, under jit) or the body's batches over the calls
// (runtime/call_expansion.h) run the same way in their frames on the device. The host
// arena holds every value before and after an execution; the device arena mirrors it while kernels
// run.
#include "runtime/cuda_executor.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "edbatch/errors.h"
#include "ir/bounded_cache.h"
#include "jit/kernel_ir.h"
#include "nvrtc/cuda_compiler.h"
#include "nvrtc/cuda_driver.h"
#include "nvrtc/cuda_render.h"
#include "runtime/call_expansion.h"
#include "runtime/cell_lowering.h"

namespace edb::runtime {

namespace {

using nvrtc::CUdeviceptr;

constexpr size_t kMaxKernelInputs = 8;  // wider sums run on the host
constexpr unsigned kThreadsPerBlock = 256;

// Device memory that grows (doubling) and keeps nothing across a growth.
struct DeviceBuffer {
  nvrtc::CudaDevice* device = nullptr;
  CUdeviceptr pointer = 0;
  size_t bytes = 0;

  void reserve(size_t wanted) {
    if (wanted <= bytes) return;
    const size_t grown = std::max(wanted, bytes * 2);
    device->release(pointer);  // waits for the stream: queued kernels may still read it
    pointer = 0;
    bytes = 0;
    pointer = device->allocate(grown);
    bytes = grown;
  }
  ~DeviceBuffer() {
    try {
      if (device) device->release(pointer);
    } catch (...) {
    }
  }
};

// jit::KernelInput's layout with device addresses: what a rendered kernel reads.
struct DeviceInput {
  CUdeviceptr base = 0;
  int64_t stride = 0;
  CUdeviceptr pointers = 0;
};
static_assert(sizeof(DeviceInput) == sizeof(jit::KernelInput));

// The kernel op of an elementwise batch that runs on the device; false for the rest.
bool kernel_op_of(const ir::Node& node, jit::KernelOp& op) {
  return jit::kernel_op_for(node.op, op) && node.arg_count <= kMaxKernelInputs;
}

}  // namespace

struct CudaExecutor::State {
  State(const std::string& cache_directory, const std::string& library, bool lower)
      : device(library),
        compiler(cache_directory, device.probe().major, device.probe().minor),
        lower_cells(lower) {
    for (DeviceBuffer* buffer : {&arena, &leaves, &staging}) buffer->device = &device;
  }

  nvrtc::CudaDevice device;
  nvrtc::CudaCompiler compiler;
  DeviceBuffer arena, leaves, staging;  // staging: per-batch pointer tables and input arrays
  // Loaded kernel functions by kernel description, at most EngineOptions::cache_entries, least
  // recently used unloaded first; the image stays in the kernel cache.
  ir::BoundedCache<std::string, nvrtc::CUfunction> functions{1024};
  nvrtc::CUfunction gemm = nullptr;

  CallExpansion calls;  // batches of cell calls, expanded over their bodies

  // Compiled cells (lower_cells): per cell, what its kernels read besides the calls' frames and
  // arguments, on the device: the packed weights, the shared slots and the fixed call slots (the
  // body's constants), uploaded once per execution (parameters may change between executions).
  bool lower_cells = false;
  struct Cell {
    std::string description;  // the program's text: its key in `functions`
    unsigned threads = 0;     // a block's threads: the rows, in whole warps, at most 256
    uint64_t execution = 0;   // the execution whose parameters the copies hold
    std::vector<std::unique_ptr<DeviceBuffer>> weights, shared, fixed;  // fixed: per call slot
    std::vector<std::vector<PackedSource>> packed_from;  // per weight: what its device copy was packed from
  };
  std::unordered_map<const CallCell*, Cell> cells;
  uint64_t execution = 0;

  // Per execution. `values` is the execution's, or, while a batch of calls runs, its expansion's
  // (whose arena lies inside the execution's: the calls' frames, or on the host only).
  const Values* values = nullptr;
  Stats* stats = nullptr;
  float* host_arena = nullptr;  // the execution's arena, which arena.pointer mirrors
  int64_t host_floats = 0;
  int depth = 0;               // 1 while a batch of calls runs its expansion
  bool host_written = false;   // that expansion wrote the host arena: the device's copy is stale
  std::unordered_map<const float*, CUdeviceptr> leaf_address;  // host leaf data -> device copy
  // Leaves first met in an expansion (the body's weights and constants, arguments outside the
  // arena): their device copies and sizes, freed when the execution ends.
  std::unordered_map<const float*, int64_t> expansion_leaf_floats;
  std::vector<CUdeviceptr> expansion_leaves;
  std::vector<uint8_t> staging_host;  // what goes into `staging` for the current batch
  std::vector<size_t> relocations;    // offsets in staging_host to turn into device addresses
  std::deque<std::vector<uint8_t>> in_flight;  // host sources of queued copies, kept until the sync
  bool device_newer = false;  // kernels wrote the device arena since the host's copy was made

  CUdeviceptr address(ir::NodeId id) const {
    const int64_t offset = values->plan.offset[id];
    if (offset >= 0) return arena_address(values->arena + offset);
    return leaf_address.at(values->graph.leaf_data(id));
  }
  // The device's copy of a place in the host arena.
  CUdeviceptr arena_address(const float* data) const { return arena.pointer + CUdeviceptr(data - host_arena) * sizeof(float); }
  bool in_host_arena(const float* data, int64_t floats) const {
    return data >= host_arena && data + floats <= host_arena + host_floats;
  }
  // The host arena up to date with the device's.
  void download_arena() {
    if (!device_newer) return;
    device.download(host_arena, arena.pointer, size_t(host_floats) * sizeof(float));
    device_newer = false;
  }

  // This batch's block of small arrays (pointer tables, input arrays), built on the host and sent
  // in one copy. stage() returns an offset into the block; relocate(at) marks the 8 bytes at `at`
  // as holding such an offset, which upload_staged() turns into a device address.
  size_t stage(const void* data, size_t bytes) {
    const size_t at = (staging_host.size() + 15) & ~size_t{15};
    staging_host.resize(at + bytes);
    std::memcpy(staging_host.data() + at, data, bytes);
    return at;
  }
  void relocate(size_t at) { relocations.push_back(at); }
  CUdeviceptr upload_staged() {
    staging.reserve(staging_host.size());
    for (size_t at : relocations) {
      CUdeviceptr value;
      std::memcpy(&value, staging_host.data() + at, sizeof value);
      value += staging.pointer;
      std::memcpy(staging_host.data() + at, &value, sizeof value);
    }
    relocations.clear();
    in_flight.push_back(std::move(staging_host));
    staging_host.clear();
    device.upload(staging.pointer, in_flight.back().data(), in_flight.back().size());
    return staging.pointer;
  }

  nvrtc::CUfunction function_for(const jit::Kernel& kernel) {
    const std::string description = jit::describe(kernel);
    if (const nvrtc::CUfunction* loaded = functions.find(description)) return *loaded;
    const nvrtc::CudaImage image = compiler.elementwise(kernel);
    count_compile(image);
    const nvrtc::CUfunction function = device.load_function(image.image, image.symbol());
    functions.insert(description, function, 0,
                     [&](const std::string&, nvrtc::CUfunction evicted) { device.unload_function(evicted); });
    return function;
  }
  void count_compile(const nvrtc::CudaImage& image) {
    if (image.compiled_now) {
      stats->kernels_compiled += 1;
      stats->time.compile_ms += image.compile_ms;
    } else {
      stats->cache_hits += 1;
    }
  }

  void upload_leaves(const scheduler::Schedule& schedule);
  void map_expansion_leaves(const scheduler::Schedule& schedule);
  void release_expansion_leaves() {
    for (CUdeviceptr copy : expansion_leaves) device.release(copy);
    expansion_leaves.clear();
    expansion_leaf_floats.clear();
  }
  void run_batches(const scheduler::Schedule& schedule, Executor& self);
  void run_calls(std::span<const ir::NodeId> members, bool node_by_node, Executor& self);
  void run_compiled(std::span<const ir::NodeId> members);
  void upload_cell(Cell& cell, const CallCell& call_cell);
  void put(std::unique_ptr<DeviceBuffer>& buffer, const void* data, size_t bytes) {
    if (!buffer) {
      buffer = std::make_unique<DeviceBuffer>();
      buffer->device = &device;
    }
    buffer->reserve(bytes);
    device.upload(buffer->pointer, data, bytes);
  }
  // Where a value a call reads or writes lies on the device: in the arena, or a leaf uploaded.
  CUdeviceptr device_address(const float* data) const {
    if (in_host_arena(data, 1)) return arena_address(data);
    const auto found = leaf_address.find(data);
    if (found == leaf_address.end())
      throw InternalError("cuda executor: a compiled cell's call reads host memory that is neither the arena nor a leaf");
    return found->second;
  }
  void run_expansion(const scheduler::Schedule& schedule, const Values& inner, Executor& self);
  void run_elementwise(std::span<const ir::NodeId> members, jit::KernelOp op);
  void copy_members(std::span<const ir::NodeId> members, size_t slot);  // out_k = arg_k[slot]
  void run_linear(std::span<const ir::NodeId> members);
  void run_on_host(std::span<const ir::NodeId> members);
  bool linear_on_device(std::span<const ir::NodeId> members) const;
  void launch_elementwise(const jit::Kernel& kernel, const std::vector<DeviceInput>& inputs,
                          const std::vector<CUdeviceptr>& outputs, int64_t members, int64_t elements);
};

// Every leaf the schedule reads, once per distinct host buffer (its largest use), packed into one
// upload.
void CudaExecutor::State::upload_leaves(const scheduler::Schedule& schedule) {
  leaf_address.clear();
  std::vector<const float*> order;
  std::unordered_map<const float*, int64_t> floats_of;
  for (ir::NodeId id : schedule.nodes)
    for (ir::NodeId arg : values->graph.args(id)) {
      if (values->plan.offset[arg] >= 0) continue;
      const float* data = values->graph.leaf_data(arg);
      const int64_t size = values->graph.node(arg).shape.size();
      auto [it, inserted] = floats_of.try_emplace(data, size);
      if (inserted) order.push_back(data);
      else it->second = std::max(it->second, size);
    }
  size_t floats = 0;
  std::vector<size_t> offsets;
  for (const float* data : order) {
    offsets.push_back(floats);
    floats += size_t(floats_of[data]);
  }
  std::vector<uint8_t> packed(floats * sizeof(float));
  for (size_t i = 0; i < order.size(); ++i)
    std::memcpy(packed.data() + offsets[i] * sizeof(float), order[i], size_t(floats_of[order[i]]) * sizeof(float));
  leaves.reserve(packed.size());
  for (size_t i = 0; i < order.size(); ++i) leaf_address[order[i]] = leaves.pointer + offsets[i] * sizeof(float);
  in_flight.push_back(std::move(packed));
  device.upload(leaves.pointer, in_flight.back().data(), in_flight.back().size());
}

void CudaExecutor::State::launch_elementwise(const jit::Kernel& kernel, const std::vector<DeviceInput>& inputs,
                                             const std::vector<CUdeviceptr>& outputs, int64_t members,
                                             int64_t elements) {
  nvrtc::CUfunction function = function_for(kernel);
  const size_t inputs_at = stage(inputs.data(), inputs.size() * sizeof(DeviceInput));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (kernel.inputs[i] == jit::OperandAccess::gathered)
      relocate(inputs_at + i * sizeof(DeviceInput) + offsetof(DeviceInput, pointers));
  const size_t outputs_at = stage(outputs.data(), outputs.size() * sizeof(CUdeviceptr));
  const CUdeviceptr base = upload_staged();
  CUdeviceptr inputs_address = base + inputs_at, outputs_address = base + outputs_at;
  long long m = members, e = elements;
  void* parameters[] = {&m, &e, &inputs_address, &outputs_address};
  const int64_t total = members * elements;
  const int64_t blocks = std::clamp<int64_t>((total + kThreadsPerBlock - 1) / kThreadsPerBlock, 1,
                                             int64_t(std::max(1, device.probe().multiprocessors)) * 32);
  device.launch(function, unsigned(blocks), 1, kThreadsPerBlock, 1, parameters);
  stats->kernel_calls += 1;
  device_newer = true;
}

// One slot's operand: one address for all (shared), base + k * stride (strided), or a pointer
// table (gathered), decided from the members' device addresses.
DeviceInput classify(CudaExecutor::State& s, std::span<const ir::NodeId> members, size_t slot,
                     jit::OperandAccess& access) {
  std::vector<CUdeviceptr> addresses(members.size());
  for (size_t k = 0; k < members.size(); ++k) addresses[k] = s.address(s.values->graph.args(members[k])[slot]);
  DeviceInput input;
  input.base = addresses[0];
  const bool shared = std::all_of(addresses.begin(), addresses.end(), [&](CUdeviceptr a) { return a == addresses[0]; });
  if (shared) {
    access = jit::OperandAccess::shared;
    return input;
  }
  const int64_t stride_bytes = int64_t(addresses[1] - addresses[0]);
  bool strided = stride_bytes > 0 && stride_bytes % int64_t(sizeof(float)) == 0;
  for (size_t k = 2; k < members.size() && strided; ++k)
    strided = int64_t(addresses[k] - addresses[k - 1]) == stride_bytes;
  if (strided) {
    access = jit::OperandAccess::strided;
    input.stride = stride_bytes / int64_t(sizeof(float));
    return input;
  }
  access = jit::OperandAccess::gathered;
  s.stats->bytes_gathered += int64_t(members.size()) * s.values->graph.node(s.values->graph.args(members[0])[slot]).shape.size() *
                             int64_t(sizeof(float));
  input.pointers = s.stage(addresses.data(), addresses.size() * sizeof(CUdeviceptr));  // relocated at upload
  return input;
}

void CudaExecutor::State::run_elementwise(std::span<const ir::NodeId> members, jit::KernelOp op) {
  const ir::Node& first = values->graph.node(members[0]);
  jit::Kernel kernel;
  kernel.name = std::string(ir::op_name(first.op));
  std::vector<DeviceInput> inputs;
  std::vector<jit::ValueId> args;
  for (size_t slot = 0; slot < first.arg_count; ++slot) {
    jit::OperandAccess access;
    inputs.push_back(classify(*this, members, slot, access));
    kernel.inputs.push_back(access);
    args.push_back(kernel.load(int32_t(slot)));
  }
  jit::ValueId value = args[0];
  if (jit::kernel_op_has_constant(op)) value = kernel.with_constant(op, value, first.attrs.constant);
  else if (jit::kernel_op_arity(op) == 1) value = kernel.unary(op, value);
  else
    for (size_t i = 1; i < args.size(); ++i) value = kernel.binary(op, value, args[i]);
  kernel.store(value);
  launch_elementwise(kernel, inputs, {address(members[0])}, int64_t(members.size()), first.shape.size());
}

void CudaExecutor::State::copy_members(std::span<const ir::NodeId> members, size_t slot) {
  const ir::Node& first = values->graph.node(members[0]);
  jit::Kernel kernel;
  kernel.name = "copy";
  jit::OperandAccess access;
  std::vector<DeviceInput> inputs{classify(*this, members, slot, access)};
  kernel.inputs.push_back(access);
  kernel.store(kernel.load(0));
  launch_elementwise(kernel, inputs, {address(members[0])}, int64_t(members.size()), first.shape.size());
}

// matmul and affine whose weights are one parameter for every member: one GEMM per weight.
bool CudaExecutor::State::linear_on_device(std::span<const ir::NodeId> members) const {
  const ir::Node& first = values->graph.node(members[0]);
  if (first.op != ir::Op::matmul && first.op != ir::Op::affine) return false;
  for (size_t slot = first.op == ir::Op::affine ? 1 : 0; slot + 1 < first.arg_count; slot += 2)
    for (ir::NodeId id : members)
      if (address(values->graph.args(id)[slot]) != address(values->graph.args(members[0])[slot])) return false;
  return true;
}

void CudaExecutor::State::run_linear(std::span<const ir::NodeId> members) {
  const ir::Node& first = values->graph.node(members[0]);
  const bool affine = first.op == ir::Op::affine;
  if (affine) copy_members(members, 0);  // the bias, then the products add to it
  if (!gemm) {
    const nvrtc::CudaImage image = compiler.gemm();
    count_compile(image);
    gemm = device.load_function(image.image, image.symbol());
  }
  const int64_t n = int64_t(members.size());
  bool accumulate = affine;
  for (size_t slot = affine ? 1 : 0; slot + 1 < first.arg_count; slot += 2) {
    const ir::Shape w = values->graph.node(values->graph.args(members[0])[slot]).shape;
    const ir::Shape x = values->graph.node(values->graph.args(members[0])[slot + 1]).shape;
    std::vector<CUdeviceptr> xs(members.size());
    for (size_t k = 0; k < members.size(); ++k) xs[k] = address(values->graph.args(members[k])[slot + 1]);
    const size_t at = stage(xs.data(), xs.size() * sizeof(CUdeviceptr));
    CUdeviceptr table = upload_staged() + at;
    CUdeviceptr weight = address(values->graph.args(members[0])[slot]), out = address(members[0]);
    int rows = int(w.rows), depth = int(w.cols), cols = int(x.cols), add = accumulate ? 1 : 0;
    long long count = n;
    void* parameters[] = {&rows, &depth, &cols, &count, &weight, &table, &out, &add};
    const int64_t tiles = (n * cols + nvrtc::kGemmTile - 1) / nvrtc::kGemmTile;
    device.launch(gemm, unsigned((rows + nvrtc::kGemmTile - 1) / nvrtc::kGemmTile), unsigned(std::min<int64_t>(tiles, 65535)),
                  nvrtc::kGemmTile, nvrtc::kGemmTile, parameters);
    stats->kernel_calls += 1;
    accumulate = true;
  }
  device_newer = true;
}

// Anything without a device kernel: bring the host arena up to date, compute, send the outputs back.
void CudaExecutor::State::run_on_host(std::span<const ir::NodeId> members) {
  download_arena();
  for (ir::NodeId id : members) evaluate_node(*values, id);
  const int64_t size = values->graph.node(members[0]).shape.size();
  const int64_t offset = values->plan.offset[members[0]];
  device.upload(address(members[0]), values->arena + offset, size_t(size * int64_t(members.size())) * sizeof(float));
  device.synchronize();  // the host arena may change again before the copy would otherwise run
  stats->kernel_calls += 1;
}

CudaExecutor::CudaExecutor(const std::string& cache_directory, const std::string& library, bool lower_cells)
    : state_(std::make_unique<State>(cache_directory, library, lower_cells)) {}

Capabilities CudaExecutor::capabilities() const {
  return {.lowers_cells = state_->lower_cells, .threads = false, .node_batches = false};
}

CudaExecutor::~CudaExecutor() = default;

void CudaExecutor::set_cache_entries(size_t entries) {
  state_->calls.set_capacity(entries);
  state_->functions.set_limits(std::max<size_t>(entries, 1), 0, [&](const std::string&, nvrtc::CUfunction evicted) {
    state_->device.unload_function(evicted);
  });
}

void CudaExecutor::cache_sizes(CacheSizes& sizes) const {
  sizes.device_kernels = state_->functions.sizes();
  sizes.call_expansions = state_->calls.sizes();
}

void CudaExecutor::forget_cells() {
  state_->calls.clear();
  state_->cells.clear();
}

// The leaves an expansion reads: a call's argument or frame rows inside the arena are read where
// they lie on the device; a leaf the execution uploaded is read there; any other (the body's
// weights and constants) is uploaded once per execution.
void CudaExecutor::State::map_expansion_leaves(const scheduler::Schedule& schedule) {
  for (ir::NodeId id : schedule.nodes)
    for (ir::NodeId arg : values->graph.args(id)) {
      if (values->plan.offset[arg] >= 0) continue;
      const float* data = values->graph.leaf_data(arg);
      const int64_t floats = values->graph.node(arg).shape.size();
      if (in_host_arena(data, floats)) {
        leaf_address[data] = arena_address(data);
        continue;
      }
      const auto known = expansion_leaf_floats.find(data);
      if (leaf_address.count(data) && (known == expansion_leaf_floats.end() || known->second >= floats)) continue;
      const CUdeviceptr copy = device.allocate(size_t(floats) * sizeof(float));
      expansion_leaves.push_back(copy);
      device.upload(copy, data, size_t(floats) * sizeof(float));
      leaf_address[data] = copy;
      expansion_leaf_floats[data] = floats;
    }
}

void CudaExecutor::State::run_batches(const scheduler::Schedule& schedule, Executor& self) {
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    const std::span<const ir::NodeId> members = schedule.batch(b);
    if (values->plan.is_view(members[0])) continue;
    const ir::Node& first = values->graph.node(members[0]);
    if (first.op == ir::Op::call) {
      run_calls(members, schedule.node_by_node, self);
      continue;
    }
    if (ir::is_node_batch(first))  // recorded only where cells compile on the CPU
      throw InternalError("cuda executor: batch " + std::to_string(b) + " is of batch nodes");
    const int64_t size = first.shape.size();
    for (size_t k = 1; k < members.size(); ++k)
      if (values->plan.offset[members[k]] != values->plan.offset[members[0]] + int64_t(k) * size)
        throw InternalError("cuda executor: batch " + std::to_string(b) +
                            "'s outputs are not consecutive in member order (plan contract C1)");
    jit::KernelOp op;
    if (kernel_op_of(first, op)) run_elementwise(members, op);
    else if (linear_on_device(members)) run_linear(members);
    else run_on_host(members);
  }
}

// A batch of calls of a cell that lowers (under lower_cells): one launch of the kernel rendered from
// its program, a block per call (grid-stride), each call's pointer table built as the jit's
// (runtime/cell_kernels.cpp) with device addresses.
void CudaExecutor::State::run_compiled(std::span<const ir::NodeId> members) {
  const ir::Graph& graph = values->graph;
  const auto& call_cell = static_cast<const CallCell&>(graph.cell(graph.node(members[0]).attrs.index));
  const jit::CellProgram& program = call_cell.lowering.program;
  Cell& cell = cells[&call_cell];
  if (cell.description.empty()) {
    cell.description = jit::describe(program);
    cell.threads = unsigned(std::min<int64_t>(256, (int64_t(program.rows) + 31) / 32 * 32));
  }
  nvrtc::CUfunction function = nullptr;
  if (const nvrtc::CUfunction* loaded = functions.find(cell.description)) {
    function = *loaded;
  } else {
    const nvrtc::CudaImage image = compiler.cell(program);
    count_compile(image);
    function = device.load_function(image.image, image.symbol());
    functions.insert(cell.description, function, 0,
                     [&](const std::string&, nvrtc::CUfunction evicted) { device.unload_function(evicted); });
  }
  if (cell.execution != execution) {
    upload_cell(cell, call_cell);
    cell.execution = execution;
  }
  const size_t slots = call_cell.slots.size();
  std::vector<CUdeviceptr> table(members.size() * slots);
  for (size_t j = 0; j < members.size(); ++j) {
    const ir::NodeId c = members[j];
    if (ir::is_call_batch(graph.node(c)))  // recorded only where the executor runs node batches
      throw InternalError("cuda executor: a batch call %" + std::to_string(c));
    const auto args = graph.args(c);
    for (size_t s = 0; s < slots; ++s) {
      const CallCell::Slot& at = call_cell.slots[s];
      CUdeviceptr& to = table[j * slots + s];
      if (at.kind == CallCell::Slot::frame) to = device_address(values->out(c) + at.at);
      else if (at.kind == CallCell::Slot::argument) to = device_address(values->in(args[size_t(at.at)]));
      else to = cell.fixed[s]->pointer;
    }
  }
  std::vector<CUdeviceptr> shared, weights;
  for (const auto& buffer : cell.shared) shared.push_back(buffer->pointer);
  for (const auto& buffer : cell.weights) weights.push_back(buffer->pointer);
  const size_t table_at = stage(table.data(), table.size() * sizeof(CUdeviceptr));
  const size_t shared_at = stage(shared.data(), shared.size() * sizeof(CUdeviceptr));
  const size_t weights_at = stage(weights.data(), weights.size() * sizeof(CUdeviceptr));
  const CUdeviceptr base = upload_staged();
  long long calls = static_cast<long long>(members.size());
  // An empty table is passed as null (the kernel reads none of it).
  CUdeviceptr pointers = base + table_at, shared_table = shared.empty() ? 0 : base + shared_at,
              weight_table = weights.empty() ? 0 : base + weights_at;
  void* parameters[] = {&calls, &shared_table, &weight_table, &pointers};
  device.launch(function, unsigned(std::min<int64_t>(calls, 65535)), 1, cell.threads, 1, parameters);
  stats->kernel_calls += 1;
  device_newer = true;
}

// A cell's packed weights (jit::pack_weight in the renderer's vector; packed and sent again only
// when a piece's parameter moved or changed), shared slots and fixed call slots, from the
// parameters and constants as they are now.
void CudaExecutor::State::upload_cell(Cell& cell, const CallCell& call_cell) {
  const CellLowering& lowering = call_cell.lowering;
  const int32_t rows = lowering.program.rows, vector = nvrtc::CudaCompiler::kCellVector;
  cell.weights.resize(lowering.weights.size());
  cell.packed_from.resize(lowering.weights.size());
  std::vector<float> packed;
  for (size_t w = 0; w < lowering.weights.size(); ++w) {
    const CellLowering::Weight& weight = lowering.weights[w];
    std::vector<jit::WeightPiece> pieces;
    std::vector<PackedSource> sources;
    int64_t k = 0;
    for (size_t p = 0; p < weight.pieces.size(); ++p) {
      const ir::ParameterInfo& info = weight_parameter(call_cell, w, p);
      sources.push_back(packed_source(info));
      pieces.push_back(weight_piece(weight, info));
      k += pieces.back().cols;
    }
    if (cell.weights[w] && cell.packed_from[w] == sources) continue;  // the device holds it packed already
    cell.packed_from[w] = std::move(sources);
    packed.assign(size_t(jit::packed_weight_floats(rows, weight.blocks, k, vector)), 0.0f);
    jit::pack_weight(rows, weight.blocks, pieces, vector, packed.data());
    put(cell.weights[w], packed.data(), packed.size() * sizeof(float));
  }
  cell.shared.resize(call_cell.shared.size());
  for (size_t i = 0; i < call_cell.shared.size(); ++i) {
    const int64_t floats = call_cell.body.node(shared_slot_leaf(call_cell, i)).shape.size();
    put(cell.shared[i], call_cell.shared[i], size_t(floats) * sizeof(float));
  }
  cell.fixed.resize(call_cell.slots.size());
  for (size_t s = 0; s < call_cell.slots.size(); ++s) {
    if (call_cell.slots[s].kind != CallCell::Slot::fixed) continue;
    const int64_t floats = call_cell.body.node(fixed_slot_leaf(call_cell, s)).shape.size();
    put(cell.fixed[s], call_cell.slots[s].constant, size_t(floats) * sizeof(float));
  }
}

// A batch of calls: one compiled kernel where the cell lowers (run_compiled), else its expansion
// runs through execute() again (run_expansion), on the device in the calls' frames; an expansion in
// an arena of its own (calls not laid out as one batch of frames) runs on the host, and the host
// arena, which then holds the frames, goes back up whole.
void CudaExecutor::State::run_calls(std::span<const ir::NodeId> members, bool node_by_node, Executor& self) {
  if (depth > 0) throw InternalError("cuda executor: a cell's body calls a cell");
  const ir::Graph& graph = values->graph;
  if (lower_cells && !node_by_node && static_cast<const CallCell&>(graph.cell(graph.node(members[0]).attrs.index)).lowered) {
    run_compiled(members);
    return;
  }
  struct Depth {
    int& depth;
    explicit Depth(int& d) : depth(d) { ++depth; }
    ~Depth() { --depth; }
  };
  const Values* outer = values;
  host_written = false;
  {
    const Depth nested(depth);
    calls.run(self, members, *outer, *stats, node_by_node);
  }
  values = outer;
  if (host_written) {
    device.upload(arena.pointer, host_arena, size_t(host_floats) * sizeof(float));
    host_written = false;
  }
}

void CudaExecutor::State::run_expansion(const scheduler::Schedule& schedule, const Values& inner, Executor& self) {
  values = &inner;
  if (in_host_arena(inner.arena, inner.plan.arena_floats)) {
    map_expansion_leaves(schedule);
    run_batches(schedule, self);
    return;
  }
  download_arena();  // the arguments and frames the expansion reads
  for (ir::NodeId id : schedule.nodes) {
    if (inner.plan.is_view(id)) continue;
    evaluate_node(inner, id);
    stats->kernel_calls += 1;
  }
  host_written = true;
}

void CudaExecutor::execute(const scheduler::Schedule& schedule, const Values& values, Stats& stats) {
  State& s = *state_;
  if (s.depth > 0) {  // a batch of calls' expansion (State::run_calls)
    s.run_expansion(schedule, values, *this);
    return;
  }
  s.release_expansion_leaves();  // an execution that threw left them
  ++s.execution;
  s.values = &values;
  s.stats = &stats;
  s.device_newer = false;
  s.host_arena = values.arena;
  s.host_floats = values.plan.arena_floats;
  const size_t arena_bytes = size_t(values.plan.arena_floats) * sizeof(float);
  s.arena.reserve(arena_bytes);
  s.device.upload(s.arena.pointer, values.arena, arena_bytes);  // earlier evaluations' values
  s.upload_leaves(schedule);
  s.run_batches(schedule, *this);
  if (s.device_newer) s.device.download(values.arena, s.arena.pointer, arena_bytes);
  s.device.synchronize();
  s.in_flight.clear();
  s.release_expansion_leaves();
}

}  // namespace edb::runtime
