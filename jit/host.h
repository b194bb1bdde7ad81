// What the host CPU is, as LLVM sees it: the name and features that the JIT targets and that go
// into kernel cache keys. Plain strings, so nothing outside jit/ needs LLVM headers.
#pragma once

#include <string>

namespace edb::jit {

std::string host_cpu_name();      // e.g. "znver4"
std::string host_cpu_features();  // sorted "+avx2,+avx512f,..." of enabled features
std::string llvm_version();       // e.g. "19.1.7"

}  // namespace edb::jit
