// libFuzzer target: the kernel cache's entry files. The cache never throws for what it finds on
// disk: a bad file is a miss (with a reason from read(), a problem from verify()). Inputs whose
// first byte is 1 are instead split at NUL bytes into an entry's fields, stored, and read back
// by a fresh cache, which must return the same fields.
#include <filesystem>
#include <vector>

#include "jit/kernel_cache.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edb;
  const std::string directory = fuzz::scratch_directory() + "/cache";
  jit::KernelCacheOptions options;
  options.directory = directory;
  options.warn = [](const std::string&) {};
  if (size > 0 && data[0] == 1) {
    std::vector<std::string> fields(7);
    size_t field = 0;
    for (size_t i = 1; i < size && field < fields.size(); ++i) {
      if (data[i] == 0) ++field;
      else fields[field] += char(data[i]);
    }
    jit::KernelEntry entry;
    entry.description = fields[0];
    entry.backend = fields[1];
    entry.target = fields[2];
    entry.flags = fields[3];
    entry.object = fields[4];
    entry.ir = fields[5];
    entry.assembly = fields[6];
    entry.compile_ms = double(size);
    if (!fuzz::accepts([&] { entry.key = jit::kernel_key(entry.description, entry.backend, entry.target, entry.flags); }))
      return 0;  // an empty description or backend
    jit::KernelCache(options).store(entry);
    std::string problem;
    const std::optional<jit::KernelEntry> read = jit::KernelCache(options).read(entry.key, &problem);
    fuzz::require(read.has_value(), "a stored entry reads back");
    fuzz::require(read->description == entry.description && read->backend == entry.backend &&
                      read->target == entry.target && read->flags == entry.flags && read->object == entry.object &&
                      read->ir == entry.ir && read->assembly == entry.assembly && read->compile_ms == entry.compile_ms &&
                      read->code == entry.code,
                  "a stored entry reads back with the same fields");
    jit::KernelCache(options).clear();
    return 0;
  }
  const jit::KernelKey key = jit::kernel_key("fuzz kernel", "llvm", "fuzz-cpu", "-O3");
  std::filesystem::create_directories(directory);
  jit::KernelCache cache(options);
  fuzz::write_scratch("cache/" + key.hex() + ".kernel", data, size);
  std::string problem;
  const std::optional<jit::KernelEntry> read = cache.read(key, &problem);
  fuzz::require(read.has_value() == problem.empty(), "read() gives an entry or a reason");
  const std::vector<jit::VerifyResult> verified = cache.verify();
  fuzz::require(verified.size() == 1 && verified[0].ok() == read.has_value(), "verify() agrees with read()");
  (void)cache.list();
  (void)cache.lookup(key);
  return 0;
}
