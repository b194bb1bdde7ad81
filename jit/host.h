// What the JIT targets, as LLVM sees it: the host CPU's name and features, narrowed to the ISA
// that ir::selected_isa() names (EDB_ISA), and what goes into kernel cache keys. Plain strings,
// so nothing outside jit/ needs LLVM headers.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace edb::jit {

std::string host_cpu_name();      // the CPU the JIT tunes for: the host's ("znver4"), or "x86-64" under EDB_ISA=generic
std::string host_cpu_features();  // sorted "+avx2,+avx512f,..." of the features the JIT may use
std::string llvm_version();       // e.g. "19.1.7"
// Every feature LLVM reports for the host, each with whether the JIT may use it: the host's own
// answer, less the features wider than the selected ISA.
std::vector<std::pair<std::string, bool>> target_features();

}  // namespace edb::jit
