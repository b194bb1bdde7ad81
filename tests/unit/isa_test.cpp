// EDB_ISA: which ISA a name selects on which host, the errors, and what the JIT then targets.
#include "ir/isa.h"

#include <gtest/gtest.h>

#include <string>

#include "edbatch/errors.h"
#include "jit/host.h"
#include "jit/llvm_backend.h"

namespace edb::ir {
namespace {

std::string refusal(const std::string& requested, Isa host) {
  try {
    resolve_isa(requested, host);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Isa, NamesRoundTrip) {
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  EXPECT_FALSE(parse_isa("AVX2").has_value());
  EXPECT_FALSE(parse_isa("").has_value());
  EXPECT_FALSE(parse_isa("native").has_value());
}

TEST(Isa, NativeOrNothingIsTheHostsWidest) {
  for (Isa host : {Isa::generic, Isa::avx2, Isa::avx512}) {
    EXPECT_EQ(resolve_isa("", host), host);
    EXPECT_EQ(resolve_isa("native", host), host);
  }
}

TEST(Isa, NarrowerIsasRunOnWiderHosts) {
  EXPECT_EQ(resolve_isa("avx2", Isa::avx512), Isa::avx2);
  EXPECT_EQ(resolve_isa("generic", Isa::avx512), Isa::generic);
  EXPECT_EQ(resolve_isa("generic", Isa::avx2), Isa::generic);
  EXPECT_EQ(resolve_isa("avx512", Isa::avx512), Isa::avx512);
}

TEST(Isa, AWiderIsaOrAnUnknownNameIsAClearError) {
  EXPECT_EQ(refusal("avx512", Isa::avx2),
            "EDB_ISA=avx512: this CPU cannot run avx512 code; it runs generic, avx2 (unset EDB_ISA, or set it to "
            "native, for the widest)");
  EXPECT_EQ(refusal("avx2", Isa::generic),
            "EDB_ISA=avx2: this CPU cannot run avx2 code; it runs generic (unset EDB_ISA, or set it to native, for the "
            "widest)");
  EXPECT_EQ(refusal("sse4", Isa::avx512), "EDB_ISA=sse4: expected native, avx512, avx2 or generic");
  EXPECT_EQ(refusal("AVX2", Isa::avx512), "EDB_ISA=AVX2: expected native, avx512, avx2 or generic");
}

TEST(Isa, VectorsOfEachIsa) {
  EXPECT_EQ(vector_floats(Isa::avx512), 16);
  EXPECT_EQ(vector_registers(Isa::avx512), 32);
  EXPECT_EQ(vector_floats(Isa::avx2), 8);
  EXPECT_EQ(vector_registers(Isa::avx2), 16);
  EXPECT_EQ(vector_floats(Isa::generic), 4);
}

// Whatever EDB_ISA this suite runs under (scripts/test.sh runs it under each the machine has), the
// JIT targets no feature wider than the selected ISA, and the kernel key's flags name the ISA.
TEST(Isa, TheJitTargetsNothingWiderThanTheSelectedIsa) {
  const Isa isa = selected_isa();
  EXPECT_LE(isa, host_isa());
  const std::string features = "," + jit::host_cpu_features() + ",";
  if (isa < Isa::avx512) {
    EXPECT_EQ(features.find(",+avx512"), std::string::npos) << features;
    EXPECT_EQ(features.find(",+evex512,"), std::string::npos) << features;
  }
  if (isa < Isa::avx2) {
    EXPECT_EQ(features.find(",+avx"), std::string::npos) << features;
    EXPECT_EQ(features.find(",+fma,"), std::string::npos) << features;
  }
  if (isa >= Isa::avx2) {
    EXPECT_NE(features.find(",+avx2,"), std::string::npos) << features;
    EXPECT_NE(features.find(",+fma,"), std::string::npos) << features;
  }
  if (isa == Isa::avx512) {
    EXPECT_NE(features.find(",+avx512f,"), std::string::npos) << features;
  }
  EXPECT_NE(jit::llvm_kernel_flags().find(std::string(" isa=") + isa_name(isa) + " "), std::string::npos)
      << jit::llvm_kernel_flags();
  for (const auto& [name, enabled] : jit::target_features()) {
    if (enabled) {
      EXPECT_NE(features.find(",+" + name + ","), std::string::npos) << name;
    }
  }
}

}  // namespace
}  // namespace edb::ir
