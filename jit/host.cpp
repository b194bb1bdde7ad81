// Host CPU queries through LLVM's TargetParser; the only LLVM use so far, kept inside jit/.
#include "jit/host.h"

#include <algorithm>
#include <vector>

#include <llvm/ADT/StringMap.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/TargetParser/Host.h>

namespace edb::jit {

std::string host_cpu_name() { return llvm::sys::getHostCPUName().str(); }

std::string host_cpu_features() {
  std::vector<std::string> enabled;
  for (const auto& feature : llvm::sys::getHostCPUFeatures())
    if (feature.getValue()) enabled.push_back("+" + feature.getKey().str());
  std::sort(enabled.begin(), enabled.end());
  std::string joined;
  for (const std::string& f : enabled) joined += (joined.empty() ? "" : ",") + f;
  return joined;
}

std::string llvm_version() { return LLVM_VERSION_STRING; }

}  // namespace edb::jit
