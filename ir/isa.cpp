// EDB_ISA and the host's vector ISA, read through the compiler's CPU model (cpuid and xgetbv).
#include "ir/isa.h"

#include <cstdlib>

#include "edbatch/errors.h"

namespace edb::ir {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::generic: return "generic";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512})
    if (name == isa_name(isa)) return isa;
  return std::nullopt;
}

Isa host_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return Isa::avx512;
  if (__builtin_cpu_supports("x86-64-v3")) return Isa::avx2;
#endif
  return Isa::generic;
}

namespace {

std::string isas_up_to(Isa host) {
  std::string names;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512})
    if (isa <= host) names += std::string(names.empty() ? "" : ", ") + isa_name(isa);
  return names;
}

}  // namespace

Isa resolve_isa(std::string_view requested, Isa host) {
  if (requested.empty() || requested == "native") return host;
  const std::optional<Isa> isa = parse_isa(requested);
  if (!isa)
    throw UsageError("EDB_ISA=" + std::string(requested) + ": expected native, avx512, avx2 or generic");
  if (*isa > host)
    throw UsageError("EDB_ISA=" + std::string(requested) + ": this CPU cannot run " + isa_name(*isa) +
                     " code; it runs " + isas_up_to(host) + " (unset EDB_ISA, or set it to native, for the widest)");
  return *isa;
}

Isa selected_isa() {
  static const Isa isa = [] {
    const char* requested = std::getenv("EDB_ISA");
    return resolve_isa(requested ? requested : "", host_isa());
  }();
  return isa;
}

int vector_registers(Isa isa) { return isa == Isa::avx512 ? 32 : 16; }

int vector_floats(Isa isa) {
  switch (isa) {
    case Isa::avx512: return 16;
    case Isa::avx2: return 8;
    case Isa::generic: return 4;
  }
  return 4;
}

}  // namespace edb::ir
