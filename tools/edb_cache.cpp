// edb-cache: looks after the on-disk kernel cache (list, show, stats, verify, clear, prune), as a
// table or JSON. The cache itself, its file format and its pruning live in jit/kernel_cache.h.
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <edbatch/errors.h>

#include "ir/isa.h"
#include "jit/kernel_cache.h"
#include "jit/kernel_ir.h"
#include "jit/llvm_backend.h"
#include "tools/flags.h"

namespace {

using edb::UsageError;
using edb::jit::KernelCache;
using edb::jit::KernelKey;
using edb::jit::PruneResult;

void print_help() {
  std::printf(
      "usage: edb-cache COMMAND [flags]\n\n"
      "Looks after the kernel cache: compiled kernels keyed by a 128-bit hash of their canonical\n"
      "description, backend, target CPU, flags, the build's code identity and the cache format\n"
      "version. Entries another build wrote are never loaded; pruning removes them first.\n\n"
      "commands:\n"
      "  list               every entry: hash, signature, backend, target, size, compile ms, hits, last use;\n"
      "                     damaged entry files are counted on stderr and make it exit 1\n"
      "  show HASH          one entry: description, flags, LLVM IR and assembly\n"
      "  stats              entries (and how many another build wrote), total size, lifetime hits and misses\n"
      "  verify             checks every entry file; exits 1 if any is bad\n"
      "  clear              removes every entry\n"
      "  prune --max-size N removes other builds' entries, then the least recently used, until the\n"
      "                     total is at most N bytes\n"
      "                     (K, M, G suffixes: powers of 1024)\n\n"
      "flags:\n"
      "  --dir DIR          the cache directory (default: $EDB_CACHE_DIR, else ~/.cache/edbatch; an\n"
      "                     EDB_CACHE_DIR set but empty is an error)\n"
      "  --json             print JSON instead of text\n"
      "  --help             this text\n");
}

// "4096", "512K", "64M", "2G" (optionally "KB"/"KiB"): powers of 1024.
uint64_t parse_size(const std::string& text) {
  const auto bad = [&] {
    return UsageError("edb-cache: --max-size expects bytes with an optional K, M or G suffix, got '" + text + "'");
  };
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) throw bad();
  std::string suffix(end, text.data() + text.size());
  for (char& c : suffix) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.size() > 1 && (suffix.substr(1) == "B" || suffix.substr(1) == "IB")) suffix = suffix.substr(0, 1);
  int shift = 0;
  if (suffix == "K") shift = 10;
  else if (suffix == "M") shift = 20;
  else if (suffix == "G") shift = 30;
  else if (!suffix.empty()) throw bad();
  if (shift && value > (UINT64_MAX >> shift)) throw bad();
  return value << shift;
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double value = double(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit ? "%.1f %s" : "%.0f %s", value, units[unit]);
  return text;
}

std::string local_time(int64_t unix_ms) {
  const std::time_t seconds = std::time_t(unix_ms / 1000);
  std::tm parts{};
  localtime_r(&seconds, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
  return text;
}

std::string clipped(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 3) + "...";
}

// Damaged entry files are not listed; they are counted on stderr and make the exit status 1, as
// verify's (which names them).
int list(KernelCache& cache, bool json) {
  size_t damaged = 0;
  const auto infos = cache.list(&damaged);
  const auto report_damaged = [&] {
    if (damaged == 0) return 0;
    std::fprintf(stderr, "edb-cache list: %zu damaged entry file%s in %s not listed (edb-cache verify names them)\n",
                 damaged, damaged == 1 ? "" : "s", cache.directory().c_str());
    return 1;
  };
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& i : infos)
      out.push_back({{"hash", i.key.hex()}, {"signature", i.signature}, {"backend", i.backend}, {"target", i.target},
                     {"flags", i.flags}, {"code", i.code}, {"this_build", i.code == edb::jit::code_identity()},
                     {"bytes", i.bytes}, {"compile_ms", i.compile_ms}, {"hits", i.hits},
                     {"last_used_ms", i.last_used_ms}});
    std::cout << out.dump(2) << '\n';
    return report_damaged();
  }
  std::printf("%-32s  %-30s  %-7s  %-12s  %10s  %10s  %6s  %s\n", "hash", "signature", "backend", "target", "size",
              "compile ms", "hits", "last used");
  for (const auto& i : infos)
    std::printf("%-32s  %-30s  %-7s  %-12s  %10s  %10.1f  %6llu  %s\n", i.key.hex().c_str(),
                clipped(i.signature, 30).c_str(), clipped(i.backend, 7).c_str(), clipped(i.target, 12).c_str(),
                human_bytes(i.bytes).c_str(), i.compile_ms, static_cast<unsigned long long>(i.hits),
                local_time(i.last_used_ms).c_str());
  std::printf("%zu entries in %s\n", infos.size(), cache.directory().c_str());
  return report_damaged();
}

// The ISA an entry's code was built for: its flags' "isa=NAME" (llvm_kernel_flags), or "".
std::string entry_isa(const std::string& flags) {
  const size_t at = flags.find("isa=");
  if (at == std::string::npos) return "";
  const size_t begin = at + 4;
  return flags.substr(begin, flags.find(' ', begin) - begin);
}

// Regenerates for the entry's own ISA where it can: the ISA is read from EDB_ISA once per process,
// so it is set before the first read, unless the user set it or the CPU cannot run that ISA.
// Returns why this process's ISA is not the entry's, or "" when it is.
std::string select_entry_isa(const std::string& isa) {
  const std::optional<edb::ir::Isa> wanted = edb::ir::parse_isa(isa);
  std::string why;
  if (!wanted) why = "its ISA is not known here";
  else if (*wanted > edb::ir::host_isa()) why = "this CPU runs " + std::string(edb::ir::isa_name(edb::ir::host_isa())) + " at most";
  else if (const char* set = std::getenv("EDB_ISA"); set && *set) why = std::string("EDB_ISA=") + set + " is set";
  else setenv("EDB_ISA", isa.c_str(), 1);
  if (wanted && edb::ir::selected_isa() == *wanted) return "";
  return why.empty() ? "this process had already chosen its ISA" : why;
}

int show(KernelCache& cache, const std::string& hash, bool json) {
  const std::optional<KernelKey> key = KernelKey::from_hex(hash);
  if (!key) throw UsageError("edb-cache show: expected HASH as 32 hex digits, got '" + hash + "'");
  std::string problem;
  auto entry = cache.read(*key, &problem);
  if (!entry && problem.empty())
    throw UsageError("edb-cache show: no kernel " + key->hex() + " in " + cache.directory() + " (see edb-cache list)");
  if (!entry) throw std::runtime_error(cache.entry_path(*key) + ": " + problem);
  // Engines store no IR or assembly (it would slow every compile); rebuild both from the stored
  // description with this machine's LLVM backend. The key tells whether that is the same code.
  std::string regenerated;
  if ((entry->ir.empty() || entry->assembly.empty()) && entry->backend == "llvm") {
    const std::string isa = entry_isa(entry->flags);
    const std::string other_isa = isa.empty() ? "" : select_entry_isa(isa);
    edb::jit::LlvmBackend backend(edb::jit::LlvmBackendOptions{true, true});
    const bool cell = entry->description.starts_with("cell ");
    const edb::jit::CompiledKernel compiled = cell ? backend.compile(edb::jit::parse_cell_program(entry->description))
                                                   : backend.compile(edb::jit::parse_kernel(entry->description));
    if (entry->ir.empty()) entry->ir = compiled.ir;
    if (entry->assembly.empty()) entry->assembly = compiled.assembly;
    regenerated = compiled.key == entry->key
                      ? "regenerated from the description on this machine (same key: the same code)"
                      : "regenerated from the description for this machine's target " + compiled.target +
                            " and this build (key " + compiled.key.hex() + "): the stored object was built for "
                            "another target or by another build";
    if (!other_isa.empty())
      regenerated += "; for " + std::string(edb::ir::isa_name(edb::ir::selected_isa())) + ", not the entry's " + isa +
                     " (" + other_isa + ")";
  }
  if (json) {
    const nlohmann::json out = {{"hash", entry->key.hex()},     {"symbol", entry->key.symbol()},
                                {"backend", entry->backend},     {"target", entry->target},
                                {"flags", entry->flags},         {"code", entry->code},
                                {"compile_ms", entry->compile_ms},
                                {"object_bytes", entry->object.size()}, {"description", entry->description},
                                {"ir", entry->ir},               {"assembly", entry->assembly},
                                {"regenerated", regenerated}};
    std::cout << out.dump(2) << '\n';
    return 0;
  }
  std::printf("kernel %s (symbol %s)\nbackend %s, target %s, flags %s\ncode %s%s\ncompile %.1f ms, object %s\n\n",
              entry->key.hex().c_str(), entry->key.symbol().c_str(), entry->backend.c_str(), entry->target.c_str(),
              entry->flags.c_str(), entry->code.c_str(),
              entry->code == edb::jit::code_identity() ? " (this build)" : " (another build: never loaded here)",
              entry->compile_ms, human_bytes(entry->object.size()).c_str());
  std::printf("== description ==\n%s\n", entry->description.c_str());
  if (!regenerated.empty()) std::printf("\n(LLVM IR and assembly %s)\n", regenerated.c_str());
  std::printf("\n== LLVM IR ==\n%s\n", entry->ir.empty() ? "(not stored)" : entry->ir.c_str());
  std::printf("\n== assembly ==\n%s\n", entry->assembly.empty() ? "(not stored)" : entry->assembly.c_str());
  return 0;
}

int stats(KernelCache& cache, bool json) {
  const auto s = cache.stats();
  const double rate = s.hits + s.misses ? double(s.hits) / double(s.hits + s.misses) : 0.0;
  if (json) {
    const nlohmann::json out = {{"directory", s.directory},
                                {"entries", s.entries},
                                {"total_bytes", s.total_bytes},
                                {"other_build_entries", s.other_build_entries},
                                {"other_build_bytes", s.other_build_bytes},
                                {"code", edb::jit::code_identity()},
                                {"hits", s.hits},
                                {"misses", s.misses},
                                {"stores", s.stores},
                                {"hit_rate", rate}};
    std::cout << out.dump(2) << '\n';
    return 0;
  }
  std::printf("directory   %s\nentries     %llu\nother build %llu (%s; never loaded by this build, pruned first)\n"
              "total size  %s\nhits        %llu\nmisses      %llu\nstores      %llu\nhit rate    %.1f%%\n",
              s.directory.c_str(), static_cast<unsigned long long>(s.entries),
              static_cast<unsigned long long>(s.other_build_entries), human_bytes(s.other_build_bytes).c_str(),
              human_bytes(s.total_bytes).c_str(),
              static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses),
              static_cast<unsigned long long>(s.stores), 100 * rate);
  return 0;
}

int verify(KernelCache& cache, bool json) {
  const auto results = cache.verify();
  size_t bad = 0;
  for (const auto& r : results) bad += r.ok() ? 0 : 1;
  if (json) {
    nlohmann::json files = nlohmann::json::array();
    for (const auto& r : results) files.push_back({{"file", r.file}, {"ok", r.ok()}, {"problem", r.problem}});
    std::cout << nlohmann::json{{"files", files}, {"bad", bad}}.dump(2) << '\n';
  } else {
    for (const auto& r : results)
      std::printf("%s  %s\n", r.ok() ? "ok " : "BAD", r.ok() ? r.file.c_str() : (r.file + ": " + r.problem).c_str());
    std::printf("%zu entries, %zu bad\n", results.size(), bad);
  }
  return bad ? 1 : 0;
}

int run(int argc, char** argv) {
  edb::tools::Flags flags("edb-cache", {"dir", "max-size"}, {"json", "help"});
  const std::vector<std::string> args = flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    print_help();
    return 0;
  }
  if (args.empty()) throw UsageError("edb-cache: which command? list, show, stats, verify, clear or prune (see --help)");
  const std::string& command = args[0];
  const size_t expected_args = command == "show" ? 2 : 1;
  const bool known = command == "list" || command == "show" || command == "stats" || command == "verify" ||
                     command == "clear" || command == "prune";
  if (!known) throw UsageError("edb-cache: unknown command '" + command + "' (see --help)");
  if (command == "show" && args.size() < 2) throw UsageError("edb-cache show: which HASH? (see edb-cache list)");
  if (args.size() != expected_args)
    throw UsageError("edb-cache " + command + ": unexpected argument '" + args[expected_args] + "'");
  if (flags.has("max-size") != (command == "prune"))
    throw UsageError(command == "prune" ? "edb-cache prune: needs --max-size N"
                                        : "edb-cache " + command + ": --max-size belongs to prune");

  edb::jit::KernelCacheOptions options;
  options.directory = flags.get("dir", "");
  if (options.directory.empty() && KernelCache::default_directory().empty())
    throw UsageError(std::getenv("EDB_CACHE_DIR")
                         ? "edb-cache: EDB_CACHE_DIR is set but empty: name a directory, unset it (for "
                           "~/.cache/edbatch), or pass --dir"
                         : "edb-cache: no cache directory: set EDB_CACHE_DIR or HOME, or pass --dir");
  // A directory that is missing is an empty cache; a file there is a mistake to name, not a cache.
  const std::string directory = options.directory.empty() ? KernelCache::default_directory() : options.directory;
  if (std::error_code error; std::filesystem::exists(directory, error) && !std::filesystem::is_directory(directory, error))
    throw UsageError("edb-cache: the cache directory '" + directory + "' is not a directory");
  KernelCache cache(options);
  const bool json = flags.has("json");
  if (command == "list") return list(cache, json);
  if (command == "show") return show(cache, args[1], json);
  if (command == "stats") return stats(cache, json);
  if (command == "verify") return verify(cache, json);
  // Files that could not be removed (a read-only directory) make the command fail, saying which.
  auto failed = [&](const PruneResult& r) {
    if (!r.failed) return 0;
    std::fprintf(stderr, "edb-cache %s: could not remove %llu file(s) in %s; the first: %s\n", command.c_str(),
                 static_cast<unsigned long long>(r.failed), cache.directory().c_str(), r.failure.c_str());
    return 1;
  };
  if (command == "clear") {
    const PruneResult cleared = cache.clear();
    if (json)
      std::cout << nlohmann::json{{"removed", cleared.removed}, {"failed", cleared.failed}, {"directory", cache.directory()}}.dump(2)
                << '\n';
    else
      std::printf("removed %llu entries from %s\n", static_cast<unsigned long long>(cleared.removed), cache.directory().c_str());
    return failed(cleared);
  }
  const uint64_t max_bytes = parse_size(flags.get("max-size", ""));
  const auto pruned = cache.prune(max_bytes);
  if (json)
    std::cout << nlohmann::json{{"removed", pruned.removed}, {"failed", pruned.failed}, {"bytes_freed", pruned.bytes_freed},
                                {"bytes_left", pruned.bytes_left}, {"max_bytes", max_bytes}}
                     .dump(2)
              << '\n';
  else
    std::printf("removed %llu entries (%s), %s left (cap %s)\n", static_cast<unsigned long long>(pruned.removed),
                human_bytes(pruned.bytes_freed).c_str(), human_bytes(pruned.bytes_left).c_str(),
                human_bytes(max_bytes).c_str());
  return failed(pruned);
}

}  // namespace

int main(int argc, char** argv) { return edb::tools::run_tool("edb-cache", run, argc, argv); }
