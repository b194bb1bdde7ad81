// Kernel IR -> LLVM IR -> O3 -> native code through ORC LLJIT, for the host CPU. The element loop
// sits in an always-inlined function whose pointers are noalias, so after inlining the vectoriser
// needs no runtime alias checks; tanh, sigmoid and exp are branch-free polynomials it can widen.
// The backend emits the object file itself and links that, so the bytes can be cached and a
// cached object linked later without LLVM's optimiser or code generator.
#include "jit/llvm_backend.h"

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <unistd.h>

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/SubtargetFeature.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include "edbatch/errors.h"
#include "ir/bounded_cache.h"
#include "ir/isa.h"
#include "jit/host.h"
#include "jit/llvm_cell.h"
#include "jit/llvm_math.h"

namespace edb::jit {

namespace {

// The compiled code reads KernelArgs and KernelInput by these byte offsets.
static_assert(offsetof(KernelArgs, members) == 0 && offsetof(KernelArgs, elements) == 8 &&
              offsetof(KernelArgs, inputs) == 16 && offsetof(KernelArgs, outputs) == 24);
static_assert(sizeof(KernelInput) == 24 && offsetof(KernelInput, base) == 0 &&
              offsetof(KernelInput, stride) == 8 && offsetof(KernelInput, pointers) == 16);

[[noreturn]] void fail(const std::string& what, llvm::Error error, const char* where = "LlvmBackend::compile") {
  throw InternalError(std::string(where) + ": " + what + ": " + llvm::toString(std::move(error)));
}

template <typename T>
T take(llvm::Expected<T> value, const std::string& what) {
  if (!value) fail(what, value.takeError());
  return std::move(*value);
}

void initialise_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

// The CPU of jit/host.h, with every feature LLVM reports, disabled ones included (a CPU name
// alone would switch on features that a virtual machine, or EDB_ISA, has switched off).
llvm::orc::JITTargetMachineBuilder host_machine() {
  llvm::orc::JITTargetMachineBuilder builder{llvm::Triple(llvm::sys::getProcessTriple())};
  builder.setCPU(host_cpu_name());
  llvm::SubtargetFeatures features;
  for (const auto& [name, enabled] : target_features()) features.AddFeature(name, enabled);
  builder.addFeatures(features.getFeatures());
  builder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  return builder;
}

// Builds one kernel's module: the element loop, then the member loop that calls it.
class Renderer {
 public:
  Renderer(llvm::Module& module)
      : module_(module), b_(module.getContext()), f32_(b_.getFloatTy()),
        i64_(b_.getInt64Ty()), ptr_(b_.getPtrTy()) {}

  void render(const Kernel& kernel, const std::string& symbol) { member_loop(kernel, symbol, element_loop(kernel)); }

 private:
  llvm::Value* instruction(const Instruction& in, llvm::Value* a, llvm::Value* c) {
    return MathEmitter(b_, f32_).op(in.op, a, c, in.constant);
  }

  // void edb_elements(i64 n, ptr noalias in0, ..., ptr noalias out0, ...): one member's elements.
  llvm::Function* element_loop(const Kernel& kernel) {
    const size_t inputs = kernel.inputs.size(), outputs = kernel.outputs.size();
    std::vector<llvm::Type*> params(1 + inputs + outputs, ptr_);
    params[0] = i64_;
    auto* function = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                            llvm::Function::InternalLinkage, "edb_elements", module_);
    function->addFnAttr(llvm::Attribute::AlwaysInline);
    function->addFnAttr(llvm::Attribute::NoUnwind);
    MathEmitter::allow_reciprocal_estimates(*function);
    for (unsigned i = 1; i < params.size(); ++i) {
      function->addParamAttr(i, llvm::Attribute::NoAlias);
      function->addParamAttr(i, llvm::Attribute::NoCapture);
      function->addParamAttr(i, i <= inputs ? llvm::Attribute::ReadOnly : llvm::Attribute::WriteOnly);
    }
    auto* entry = llvm::BasicBlock::Create(module_.getContext(), "entry", function);
    auto* loop = llvm::BasicBlock::Create(module_.getContext(), "elements", function);
    auto* exit = llvm::BasicBlock::Create(module_.getContext(), "exit", function);
    llvm::Value* n = function->getArg(0);
    b_.SetInsertPoint(entry);
    b_.CreateCondBr(b_.CreateICmpSGT(n, b_.getInt64(0)), loop, exit);

    b_.SetInsertPoint(loop);
    llvm::PHINode* e = b_.CreatePHI(i64_, 2, "e");
    e->addIncoming(b_.getInt64(0), entry);
    std::vector<llvm::Value*> values(kernel.body.size());
    for (size_t i = 0; i < kernel.body.size(); ++i) {
      const Instruction& in = kernel.body[i];
      if (in.op == KernelOp::load) {
        llvm::Value* address = b_.CreateInBoundsGEP(f32_, function->getArg(1 + unsigned(in.input)), e);
        values[i] = b_.CreateLoad(f32_, address, "x" + std::to_string(in.input));
      } else {
        values[i] = instruction(in, in.a >= 0 ? values[size_t(in.a)] : nullptr, in.b >= 0 ? values[size_t(in.b)] : nullptr);
      }
    }
    for (size_t j = 0; j < outputs; ++j)
      b_.CreateStore(values[size_t(kernel.outputs[j])],
                     b_.CreateInBoundsGEP(f32_, function->getArg(1 + unsigned(inputs + j)), e));
    llvm::Value* next = b_.CreateNUWAdd(e, b_.getInt64(1));
    e->addIncoming(next, loop);
    b_.CreateCondBr(b_.CreateICmpSLT(next, n), loop, exit);
    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
    return function;
  }

  llvm::Value* field(llvm::Value* base, int64_t byte_offset, llvm::Type* type) {
    return b_.CreateLoad(type, b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), base, uint64_t(byte_offset)));
  }

  // void <symbol>(const KernelArgs* args): reads the arguments once, then calls the element loop
  // per member with that member's pointers.
  void member_loop(const Kernel& kernel, const std::string& symbol, llvm::Function* elements_function) {
    auto* function = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), {ptr_}, false),
                                            llvm::Function::ExternalLinkage, symbol, module_);
    function->addFnAttr(llvm::Attribute::NoUnwind);
    MathEmitter::allow_reciprocal_estimates(*function);
    function->addParamAttr(0, llvm::Attribute::NoAlias);
    function->addParamAttr(0, llvm::Attribute::ReadOnly);
    auto* entry = llvm::BasicBlock::Create(module_.getContext(), "entry", function);
    auto* loop = llvm::BasicBlock::Create(module_.getContext(), "members", function);
    auto* exit = llvm::BasicBlock::Create(module_.getContext(), "exit", function);
    b_.SetInsertPoint(entry);
    llvm::Value* args = function->getArg(0);
    llvm::Value* members = field(args, offsetof(KernelArgs, members), i64_);
    llvm::Value* elements = field(args, offsetof(KernelArgs, elements), i64_);
    llvm::Value* inputs = field(args, offsetof(KernelArgs, inputs), ptr_);
    llvm::Value* outputs = field(args, offsetof(KernelArgs, outputs), ptr_);
    std::vector<llvm::Value*> bases, strides, outs;
    for (size_t i = 0; i < kernel.inputs.size(); ++i) {
      const int64_t at = int64_t(i * sizeof(KernelInput));
      const bool gathered = kernel.inputs[i] == OperandAccess::gathered;
      bases.push_back(field(inputs, at + (gathered ? offsetof(KernelInput, pointers) : offsetof(KernelInput, base)), ptr_));
      strides.push_back(kernel.inputs[i] == OperandAccess::strided ? field(inputs, at + offsetof(KernelInput, stride), i64_)
                                                                   : nullptr);
    }
    for (size_t j = 0; j < kernel.outputs.size(); ++j) outs.push_back(field(outputs, int64_t(j * sizeof(float*)), ptr_));
    llvm::Value* work = b_.CreateAnd(b_.CreateICmpSGT(members, b_.getInt64(0)), b_.CreateICmpSGT(elements, b_.getInt64(0)));
    b_.CreateCondBr(work, loop, exit);

    b_.SetInsertPoint(loop);
    llvm::PHINode* k = b_.CreatePHI(i64_, 2, "k");
    k->addIncoming(b_.getInt64(0), entry);
    std::vector<llvm::Value*> call_args{elements};
    for (size_t i = 0; i < kernel.inputs.size(); ++i) {
      switch (kernel.inputs[i]) {
        case OperandAccess::shared: call_args.push_back(bases[i]); break;
        case OperandAccess::strided:
          call_args.push_back(b_.CreateGEP(f32_, bases[i], b_.CreateMul(k, strides[i])));
          break;
        case OperandAccess::gathered:
          call_args.push_back(b_.CreateLoad(ptr_, b_.CreateInBoundsGEP(ptr_, bases[i], k)));
          break;
      }
    }
    for (llvm::Value* out : outs) call_args.push_back(b_.CreateInBoundsGEP(f32_, out, b_.CreateMul(k, elements)));
    b_.CreateCall(elements_function, call_args);
    llvm::Value* next = b_.CreateNUWAdd(k, b_.getInt64(1));
    k->addIncoming(next, loop);
    b_.CreateCondBr(b_.CreateICmpSLT(next, members), loop, exit);
    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
  }

  llvm::Module& module_;
  llvm::IRBuilder<> b_;
  llvm::Type *f32_, *i64_, *ptr_;
};

void optimise(llvm::Module& module, llvm::TargetMachine& machine) {
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager cgscc;
  llvm::ModuleAnalysisManager modules;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder builder(&machine, tuning);
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(cgscc);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, cgscc, modules);
  builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, modules);
}

std::string assembly_of(const llvm::Module& module, llvm::TargetMachine& machine) {
  std::unique_ptr<llvm::Module> copy = llvm::CloneModule(module);  // code generation changes the IR
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream out(text);
  llvm::legacy::PassManager passes;
  if (machine.addPassesToEmitFile(passes, out, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw InternalError("LlvmBackend::compile: the target machine cannot emit assembly");
  passes.run(*copy);
  return std::string(text.str());
}

// The relocatable object file of an optimised module (code generation changes the module).
std::string object_of(llvm::Module& module, llvm::TargetMachine& machine) {
  llvm::SmallVector<char, 0> bytes;
  llvm::raw_svector_ostream out(bytes);
  llvm::legacy::PassManager passes;
  if (machine.addPassesToEmitFile(passes, out, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw InternalError("LlvmBackend::compile: the target machine cannot emit object files");
  passes.run(module);
  return std::string(bytes.data(), bytes.size());
}

// Links `object` into the JIT under its own resource tracker (`tracker`) and returns `symbol`'s
// address; on failure the tracker is removed (so a later definition of the symbol does not clash)
// and throws.
KernelFunction link(llvm::orc::LLJIT& jit, const std::string& object, const std::string& symbol, const char* where,
                    llvm::orc::ResourceTrackerSP& tracker) {
  tracker = jit.getMainJITDylib().createResourceTracker();
  auto undo = [&](const std::string& what, llvm::Error error) {
    llvm::consumeError(tracker->remove());
    fail(what, std::move(error), where);
  };
  if (llvm::Error error = jit.addObjectFile(tracker, llvm::MemoryBuffer::getMemBufferCopy(object, symbol)))
    undo("cannot add the object of " + symbol, std::move(error));
  llvm::Expected<llvm::orc::ExecutorAddr> address = jit.lookup(symbol);
  if (!address) undo("cannot link " + symbol, address.takeError());
  return address->toPtr<KernelFunction>();
}

// Appends the functions of a linked kernel to perf's map of JIT code, /tmp/perf-PID.map ("START
// SIZE NAME" in hex): the entry named by its symbol and its program's first line (the cell), the
// functions beside it (a stage's epilogue) by the same with their own names. They lie in the
// entry's section, which the linker places whole, so each one's address is the entry's plus its
// distance in the object. The map only grows: a kernel removed from the JIT keeps its lines, and a
// later kernel at the same address adds its own.
void write_perf_map(const std::string& object, const std::string& symbol, const std::string& description,
                    KernelFunction entry) {
  static std::mutex mutex;
  llvm::Expected<std::unique_ptr<llvm::object::ObjectFile>> file =
      llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(object, symbol));
  if (!file) {  // the kernel linked, so this does not happen; a map without it only costs perf names
    llvm::consumeError(file.takeError());
    return;
  }
  struct Function {
    std::string name;
    uint64_t at, size;
    llvm::object::section_iterator section;
  };
  std::vector<Function> functions;
  llvm::object::section_iterator entry_section = (*file)->section_end();  // none: nothing is written
  uint64_t entry_at = 0;
  for (const llvm::object::ELFSymbolRef defined : llvm::cast<llvm::object::ELFObjectFileBase>(**file).symbols()) {
    llvm::Expected<llvm::object::SymbolRef::Type> type = defined.getType();
    llvm::Expected<llvm::StringRef> name = defined.getName();
    llvm::Expected<uint64_t> at = defined.getValue();
    llvm::Expected<llvm::object::section_iterator> section = defined.getSection();
    if (!type || !name || !at || !section || *type != llvm::object::SymbolRef::ST_Function) {
      llvm::consumeError(type.takeError());
      llvm::consumeError(name.takeError());
      llvm::consumeError(at.takeError());
      llvm::consumeError(section.takeError());
      continue;
    }
    if (*name == symbol) {
      entry_section = *section;
      entry_at = *at;
    }
    functions.push_back({name->str(), *at, defined.getSize(), *section});
  }
  const std::string label = " " + description.substr(0, description.find('\n'));
  std::string lines;
  for (const Function& function : functions) {
    if (function.section != entry_section) continue;
    char head[64];
    std::snprintf(head, sizeof head, "%llx %llx ",
                  static_cast<unsigned long long>(reinterpret_cast<uint64_t>(entry) + function.at - entry_at),
                  static_cast<unsigned long long>(function.size));
    lines += head + (function.name == symbol ? symbol : symbol + "." + function.name) + label + "\n";
  }
  std::lock_guard lock(mutex);
  if (FILE* map = std::fopen(perf_map_path().c_str(), "a")) {
    std::fwrite(lines.data(), 1, lines.size(), map);
    std::fclose(map);
  }
}

}  // namespace

std::string perf_map_path() { return "/tmp/perf-" + std::to_string(::getpid()) + ".map"; }

std::string llvm_kernel_flags() {
  return std::string("O3 isa=") + ir::isa_name(ir::selected_isa()) + " " + host_cpu_features();
}

struct LlvmBackend::State {
  std::mutex mutex;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unique_ptr<llvm::TargetMachine> machine;  // the optimiser's cost model and the code generator
  std::string target, flags;
  // One kernel's code in the JIT, removed from it when the last holder goes: the table below or a
  // CompiledKernel handed out (through a Handle, which also keeps the State). Never destroyed
  // under `mutex`, which its destructor takes.
  struct Linked {
    State* state = nullptr;
    llvm::orc::ResourceTrackerSP tracker;
    ~Linked() {
      if (!state || !tracker) return;
      std::lock_guard lock(state->mutex);
      llvm::consumeError(tracker->remove());
    }
  };
  struct Handle {
    std::shared_ptr<State> state;    // destroyed last: Linked's destructor uses it
    std::shared_ptr<Linked> linked;
  };
  struct Entry {
    CompiledKernel kernel;  // keep_alive empty: it would hold State itself
    std::shared_ptr<Linked> linked;
  };
  // At most max_kernels, least recently used out first; bytes: their objects and texts.
  ir::BoundedCache<KernelKey, Entry, KernelKeyHash> compiled{1};
  // Kernels evicted from `compiled` that a caller may still hold: while one does, its symbol stays
  // defined in the JIT, so a request for it takes it back from here (linking it again would be a
  // second definition of the symbol). Expired entries go when the map outgrows `compiled` twice.
  std::unordered_map<KernelKey, std::pair<CompiledKernel, std::weak_ptr<Linked>>, KernelKeyHash> evicted_held;

  // The kept kernel of `key`, or one evicted but still held (kept again), or null.
  Entry* find(const KernelKey& key, std::vector<Entry>& dropped) {
    if (Entry* found = compiled.find(key)) return found;
    const auto it = evicted_held.find(key);
    if (it == evicted_held.end()) return nullptr;
    Entry entry;
    entry.kernel = it->second.first;
    entry.linked = it->second.second.lock();
    evicted_held.erase(it);
    if (!entry.linked) return nullptr;
    const size_t bytes = kernel_bytes(entry.kernel);
    return keep(key, std::move(entry), bytes, dropped);
  }
  Entry* keep(const KernelKey& key, Entry entry, size_t bytes, std::vector<Entry>& dropped) {
    Entry* kept = compiled.insert(key, std::move(entry), bytes, [&](const KernelKey& evicted_key, Entry& evicted) {
      evicted_held[evicted_key] = {evicted.kernel, evicted.linked};
      dropped.push_back(std::move(evicted));
    });
    if (evicted_held.size() > 2 * compiled.max_entries() + 16)
      std::erase_if(evicted_held, [](const auto& item) { return item.second.second.expired(); });
    return kept;
  }

  // The kernel of `found` for a caller: its code kept alive with the State.
  CompiledKernel hand_out(const std::shared_ptr<State>& self, Entry& found) {
    CompiledKernel result = found.kernel;
    auto handle = std::make_shared<Handle>();
    handle->state = self;
    handle->linked = found.linked;
    result.keep_alive = std::move(handle);
    return result;
  }
  static size_t kernel_bytes(const CompiledKernel& k) {
    return k.object.size() + k.ir.size() + k.assembly.size() + k.description.size() + sizeof k;
  }
  // Keeps the kernel just linked; what is evicted for it goes into `dropped`, destroyed by the
  // caller once `mutex` is released.
  CompiledKernel add(const std::shared_ptr<State>& self, CompiledKernel kernel, llvm::orc::ResourceTrackerSP tracker,
                     std::vector<Entry>& dropped) {
    const KernelKey key = kernel.key;
    const size_t bytes = kernel_bytes(kernel);
    Entry entry;
    entry.kernel = std::move(kernel);
    entry.linked = std::make_shared<Linked>();
    entry.linked->state = this;
    entry.linked->tracker = std::move(tracker);
    return hand_out(self, *keep(key, std::move(entry), bytes, dropped));
  }
};

LlvmBackend::LlvmBackend(LlvmBackendOptions options) : options_(options), state_(std::make_shared<State>()) {
  initialise_llvm();
  state_->compiled.set_limits(std::max<size_t>(options.max_kernels, 1));
  state_->machine = take(host_machine().createTargetMachine(), "cannot create the host target machine");
  state_->jit = take(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(host_machine()).create(), "cannot create the JIT");
  state_->target = host_cpu_name();
  state_->flags = llvm_kernel_flags();
  const char* requested = std::getenv("EDB_PERF_MAP");
  if (requested && *requested && std::strcmp(requested, "0") != 0) options_.perf_map = true;
}

LlvmBackend::~LlvmBackend() = default;

size_t LlvmBackend::kernels() const {
  std::lock_guard lock(state_->mutex);
  return state_->compiled.size();
}

LlvmBackend::Sizes LlvmBackend::sizes() const {
  std::lock_guard lock(state_->mutex);
  return {state_->compiled.size(), size_t(state_->compiled.bytes()), state_->compiled.max_entries(),
          state_->compiled.evictions()};
}

template <typename Render>
CompiledKernel LlvmBackend::compile_described(std::string description, Render&& render) {
  const auto start = std::chrono::steady_clock::now();
  CompiledKernel result;
  result.description = std::move(description);
  result.target = state_->target;
  result.flags = state_->flags;
  result.key = kernel_key(result.description, "llvm", result.target, result.flags);
  const std::string symbol = result.key.symbol();

  std::vector<State::Entry> dropped;  // destroyed after the lock is released
  std::lock_guard lock(state_->mutex);
  if (State::Entry* found = state_->find(result.key, dropped)) return state_->hand_out(state_, *found);
  auto context = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>(symbol, *context);
  module->setDataLayout(state_->jit->getDataLayout());
  module->setTargetTriple(state_->jit->getTargetTriple().str());
  render(*module, symbol);
  std::string problems;
  llvm::raw_string_ostream problem_stream(problems);
  if (llvm::verifyModule(*module, &problem_stream))
    throw InternalError("LlvmBackend::compile: invalid LLVM IR for " + symbol + ": " + problems);
  optimise(*module, *state_->machine);
  if (options_.keep_ir) {
    llvm::raw_string_ostream ir(result.ir);
    module->print(ir, nullptr);
  }
  if (options_.keep_assembly) result.assembly = assembly_of(*module, *state_->machine);
  result.object = object_of(*module, *state_->machine);
  llvm::orc::ResourceTrackerSP tracker;
  result.function = link(*state_->jit, result.object, symbol, "LlvmBackend::compile", tracker);
  if (options_.perf_map) write_perf_map(result.object, symbol, result.description, result.function);
  result.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return state_->add(state_, std::move(result), std::move(tracker), dropped);
}

CompiledKernel LlvmBackend::compile(const Kernel& kernel) {
  return compile_described(describe(kernel),  // verifies the kernel
                           [&](llvm::Module& module, const std::string& symbol) { Renderer(module).render(kernel, symbol); });
}

CompiledKernel LlvmBackend::compile(const CellProgram& program) {
  return compile_described(describe(program),  // verifies the program
                           [&](llvm::Module& module, const std::string& symbol) { render_cell(module, program, symbol); });
}

CompiledKernel LlvmBackend::load(const KernelEntry& entry) {
  if (entry.backend != "llvm" || entry.target != state_->target || entry.flags != state_->flags)
    throw InternalError("LlvmBackend::load: entry " + entry.key.hex() + " is for " + entry.backend + " on " +
                        entry.target + " (" + entry.flags + "), not llvm on " + state_->target + " (" +
                        state_->flags + ")");
  if (entry.description.empty() || kernel_key(entry.description, "llvm", entry.target, entry.flags) != entry.key)
    throw InternalError("LlvmBackend::load: entry " + entry.key.hex() + " does not match its key");
  const std::string symbol = entry.key.symbol();

  std::vector<State::Entry> dropped;  // destroyed after the lock is released
  std::lock_guard lock(state_->mutex);
  CompiledKernel result;
  if (State::Entry* found = state_->find(entry.key, dropped)) return state_->hand_out(state_, *found);
  result.key = entry.key;
  result.description = entry.description;
  result.target = entry.target;
  result.flags = entry.flags;
  if (options_.keep_ir) result.ir = entry.ir;
  if (options_.keep_assembly) result.assembly = entry.assembly;
  result.object = entry.object;
  result.compile_ms = entry.compile_ms;
  llvm::orc::ResourceTrackerSP tracker;
  result.function = link(*state_->jit, result.object, symbol, "LlvmBackend::load", tracker);
  if (options_.perf_map) write_perf_map(result.object, symbol, result.description, result.function);
  return state_->add(state_, std::move(result), std::move(tracker), dropped);
}

}  // namespace edb::jit
