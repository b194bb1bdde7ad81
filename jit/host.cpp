// Host CPU queries through LLVM's TargetParser, narrowed to the selected ISA; kept inside jit/.
#include "jit/host.h"

#include <algorithm>
#include <string_view>

#include <llvm/ADT/StringMap.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/TargetParser/Host.h>

#include "ir/isa.h"

namespace edb::jit {

namespace {

bool starts_with_any(std::string_view name, std::initializer_list<std::string_view> prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](std::string_view p) { return name.substr(0, p.size()) == p; });
}

// Whether `feature` lies beyond what `isa` may use. avx2 drops the EVEX-encoded families (AVX-512,
// AVX10, AMX); generic also drops everything past SSE2 (switching off sse3 or avx switches off what
// builds on them, as LLVM's feature implications go).
bool wider_than(std::string_view feature, ir::Isa isa) {
  if (isa == ir::Isa::avx512) return false;
  if (starts_with_any(feature, {"avx512", "avx10", "amx", "evex512"})) return true;
  if (isa == ir::Isa::avx2) return false;
  return starts_with_any(feature, {"avx", "fma", "f16c", "xop", "vaes", "vpclmulqdq", "sse3", "ssse3", "sse4", "gfni"});
}

}  // namespace

std::string host_cpu_name() {
#if defined(__x86_64__)
  if (ir::selected_isa() == ir::Isa::generic) return "x86-64";
#endif
  return llvm::sys::getHostCPUName().str();
}

std::vector<std::pair<std::string, bool>> target_features() {
  const ir::Isa isa = ir::selected_isa();
  std::vector<std::pair<std::string, bool>> features;
  for (const auto& feature : llvm::sys::getHostCPUFeatures()) {
    const std::string name = feature.getKey().str();
    features.emplace_back(name, feature.getValue() && !wider_than(name, isa));
  }
  std::sort(features.begin(), features.end());
  return features;
}

std::string host_cpu_features() {
  std::string joined;
  for (const auto& [name, enabled] : target_features())
    if (enabled) joined += (joined.empty() ? "+" : ",+") + name;
  return joined;
}

std::string llvm_version() { return LLVM_VERSION_STRING; }

}  // namespace edb::jit
