// The x86 vector ISA the engine's kernels target: the widest the CPU has, or a narrower one named
// by EDB_ISA, so that one machine runs and tests every path. The JIT (jit/host) and every kernel
// compiled per ISA (runtime/outer_products) read selected_isa(); nothing else tests CPU features.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace edb::ir {

// Ordered narrow to wide: each ISA's kernels run on every CPU of a wider one.
//   generic: the x86-64 baseline (SSE2), or whatever the compiler targets off x86;
//   avx2:    x86-64-v3 (AVX2, FMA, BMI2, F16C), 16 ymm registers;
//   avx512:  x86-64-v4 (AVX-512 F, BW, DQ, VL), 32 zmm registers.
enum class Isa { generic, avx2, avx512 };

const char* isa_name(Isa isa);
// "generic", "avx2" or "avx512"; nullopt for anything else.
std::optional<Isa> parse_isa(std::string_view name);

// The widest ISA this CPU (and its operating system, which must save the wider registers) runs.
Isa host_isa();

// The ISA `requested` names under a CPU whose widest is `host`: "" and "native" mean `host`.
// Throws UsageError naming EDB_ISA, the value and the ISAs this CPU has, for a name that is not
// an ISA or an ISA wider than the host's.
Isa resolve_isa(std::string_view requested, Isa host);

// resolve_isa(EDB_ISA, host_isa()), read once per process; throws (every call) while EDB_ISA is bad.
Isa selected_isa();

// The vector registers and floats per vector of `isa`'s widest vectors.
int vector_registers(Isa isa);
int vector_floats(Isa isa);

}  // namespace edb::ir
