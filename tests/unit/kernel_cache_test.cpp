// Kernel cache: exact keys, hits and misses across cache objects, corrupt files, unusable
// directories, two processes at once, LRU pruning, and the edb-cache tool. Never touches ~/.cache.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <memory>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ir/files.h"
#include "jit/kernel_cache.h"
#include "tests/support/test_support.h"

namespace edb::jit {
namespace {

namespace fs = std::filesystem;
using edb::testing::read_file;
using edb::testing::TempDir;
using edb::testing::write_file;

KernelEntry make_entry(int id, size_t object_bytes = 64, const std::string& flags = "+avx2,+fma") {
  KernelEntry e;
  e.description = "tanh f32[" + std::to_string(id) + ",128]\nload x0\ntanh\nstore y0\n";
  e.backend = "llvm";
  e.target = "znver4";
  e.flags = flags;
  e.compile_ms = 1.5 + id;
  e.object.resize(object_bytes);
  for (size_t i = 0; i < object_bytes; ++i) e.object[i] = char((i * 31 + size_t(id) * 7) & 0xff);
  e.ir = "define void @k" + std::to_string(id) + "() { ret void }";
  e.assembly = "k" + std::to_string(id) + ":\n  ret\n";
  e.key = kernel_key(e.description, e.backend, e.target, e.flags);
  return e;
}

// A cache on `dir` whose warnings land in `warnings`.
KernelCacheOptions options_for(const std::string& dir, std::vector<std::string>* warnings,
                               uint64_t max_bytes = uint64_t{1} << 30) {
  KernelCacheOptions o;
  o.directory = dir;
  o.max_bytes = max_bytes;
  o.warn = [warnings](const std::string& line) {
    if (warnings) warnings->push_back(line);
    else ADD_FAILURE() << "unexpected warning: " << line;
  };
  return o;
}

void expect_same(const KernelEntry& a, const KernelEntry& b) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.description, b.description);
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.compile_ms, b.compile_ms);
  EXPECT_EQ(a.object, b.object);
  EXPECT_EQ(a.ir, b.ir);
  EXPECT_EQ(a.assembly, b.assembly);
}

// ---- keys ----

TEST(KernelKey, HexIsThirtyTwoLowercaseDigitsAndRoundTrips) {
  const KernelKey key = make_entry(1).key;
  const std::string hex = key.hex();
  ASSERT_EQ(hex.size(), 32u);
  for (char c : hex) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << hex;
  EXPECT_EQ(KernelKey::from_hex(hex), key);
  EXPECT_EQ(KernelKey::parse(hex), key);
  EXPECT_EQ(key.symbol(), "edb_kernel_" + hex);
  EXPECT_FALSE(KernelKey::from_hex(hex.substr(1)));
  EXPECT_FALSE(KernelKey::from_hex(hex + "0"));
  EXPECT_FALSE(KernelKey::from_hex(std::string(31, '0') + "g"));
  EXPECT_NE(edb::testing::usage_error([] { KernelKey::parse("xyz"); }).find("32 hex digits"), std::string::npos);
  EXPECT_EQ(KernelKey::parse("0123456789ABCDEF0123456789abcdef").hex(), "0123456789abcdef0123456789abcdef");
}

TEST(KernelKey, SameInputsSameKeyAndEveryInputCounts) {
  const std::string code = "jit+nvrtc 0123456789abcdef llvm 19.1.7";
  const KernelKey base = kernel_key("tanh f32[4]", "llvm", "znver4", "+avx2", code, 2);
  EXPECT_EQ(kernel_key("tanh f32[4]", "llvm", "znver4", "+avx2", code, 2), base);
  EXPECT_EQ(kernel_key("tanh f32[4]", "llvm", "znver4", "+avx2", code), base);  // version defaults to the current one
  EXPECT_NE(kernel_key("tanh f32[5]", "llvm", "znver4", "+avx2", code, 2), base);
  EXPECT_NE(kernel_key("tanh f32[4]", "cuda", "znver4", "+avx2", code, 2), base);
  EXPECT_NE(kernel_key("tanh f32[4]", "llvm", "skylake", "+avx2", code, 2), base);
  EXPECT_NE(kernel_key("tanh f32[4]", "llvm", "znver4", "+avx2,+fma", code, 2), base);
  EXPECT_NE(kernel_key("tanh f32[4]", "llvm", "znver4", "+avx2", "jit+nvrtc 0123456789abcdee llvm 19.1.7", 2), base);
  EXPECT_NE(kernel_key("tanh f32[4]", "llvm", "znver4", "+avx2", code, 1), base);
  // Fields are length-prefixed: moving a boundary between fields changes the key.
  EXPECT_NE(kernel_key("a", "llvmx", "", ""), kernel_key("a", "llvm", "x", ""));
  EXPECT_NE(kernel_key("a", "llvm", "x", "y"), kernel_key("a", "llvm", "xy", ""));
  EXPECT_NE(kernel_key("a", "llvm", "x", "y", "z"), kernel_key("a", "llvm", "x", "yz", ""));
  // Pinned so that a change to the key recipe is noticed: it must come with a format version bump.
  EXPECT_EQ(base.hex(), "509026fd905e723f3664cdafa6668b89");
}

// The build's code identity is in every key unless another is named: a hash of jit/'s and nvrtc/'s
// sources (16 hex digits) and the LLVM version, from cmake/CodeIdentity.cmake.
TEST(KernelKey, TheCodeIdentityOfThisBuildIsInEveryKey) {
  const std::string& code = code_identity();
  const std::string prefix = "jit+nvrtc ", llvm = " llvm 19.";
  ASSERT_EQ(code.substr(0, prefix.size()), prefix) << code;
  for (size_t i = prefix.size(); i < prefix.size() + 16; ++i) EXPECT_TRUE(std::isxdigit(code[i])) << code;
  EXPECT_EQ(code.substr(prefix.size() + 16, llvm.size()), llvm) << code;
  EXPECT_EQ(kernel_key("tanh f32[4]", "llvm", "znver4", "+avx2"),
            kernel_key("tanh f32[4]", "llvm", "znver4", "+avx2", code));
  EXPECT_NE(kernel_key("tanh f32[4]", "llvm", "znver4", "+avx2"),
            kernel_key("tanh f32[4]", "llvm", "znver4", "+avx2", code + " (another build)"));
  EXPECT_EQ(KernelEntry().code, code);
}

TEST(KernelKey, EmptyDescriptionOrBackendIsAUsageError) {
  EXPECT_NE(edb::testing::usage_error([] { kernel_key("", "llvm", "t", "f"); }).find("kernel_key"), std::string::npos);
  EXPECT_NE(edb::testing::usage_error([] { kernel_key("d", "", "t", "f"); }).find("kernel_key"), std::string::npos);
}

// ---- hits and misses ----

TEST(KernelCache, StoreThenLookupHitsHereAndInAFreshCache) {
  TempDir dir;
  const KernelEntry entry = make_entry(1, 1000);
  {
    KernelCache cache(options_for(dir.path(), nullptr));
    EXPECT_FALSE(cache.lookup(entry.key));  // miss before the store
    cache.store(entry);
    const auto hit = cache.lookup(entry.key);
    ASSERT_TRUE(hit);
    expect_same(*hit, entry);
    const KernelCacheCounters c = cache.counters();
    EXPECT_EQ(c.misses, 1u);
    EXPECT_EQ(c.memory_hits, 1u);
    EXPECT_EQ(c.disk_hits, 0u);
    EXPECT_EQ(c.stores, 1u);
  }
  EXPECT_TRUE(fs::exists(dir.file(entry.key.hex() + ".kernel")));
  KernelCache second(options_for(dir.path(), nullptr));  // a second process, as far as the disk knows
  const auto hit = second.lookup(entry.key);
  ASSERT_TRUE(hit);
  expect_same(*hit, entry);
  EXPECT_TRUE(second.lookup(entry.key));
  EXPECT_EQ(second.counters().disk_hits, 1u);
  EXPECT_EQ(second.counters().memory_hits, 1u);
  EXPECT_FALSE(second.lookup(make_entry(2).key));

  const KernelCacheStats s = second.stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.total_bytes, fs::file_size(dir.file(entry.key.hex() + ".kernel")));
  EXPECT_GT(s.total_bytes, 1000u);
  EXPECT_EQ(s.hits, 1u);    // disk hits only: memory hits stay in the process
  EXPECT_EQ(s.misses, 2u);  // one per cache object
  EXPECT_EQ(s.stores, 1u);

  const std::vector<KernelInfo> infos = second.list();
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_EQ(infos[0].key, entry.key);
  EXPECT_EQ(infos[0].signature, "tanh f32[1,128]");
  EXPECT_EQ(infos[0].backend, "llvm");
  EXPECT_EQ(infos[0].target, "znver4");
  EXPECT_EQ(infos[0].hits, 1u);
  EXPECT_EQ(infos[0].compile_ms, entry.compile_ms);
  EXPECT_EQ(infos[0].bytes, s.total_bytes);
  const auto verified = second.verify();
  ASSERT_EQ(verified.size(), 1u);
  EXPECT_TRUE(verified[0].ok()) << verified[0].problem;
}

// The copies kept in memory stay under max_memory_bytes, the least recently used going first; a dropped
// entry is read from the disk again (issue 31: one copy per kernel, kept for the process's life).
TEST(KernelCache, MemoryCopiesStayUnderTheirCapOldestOutFirst) {
  TempDir dir;
  KernelCacheOptions options = options_for(dir.path(), nullptr);
  options.max_memory_bytes = 5 * 10000;
  KernelCache cache(options);
  for (int id = 1; id <= 20; ++id) cache.store(make_entry(id, 9000));
  KernelCacheCounters c = cache.counters();
  EXPECT_LE(c.memory_bytes, options.max_memory_bytes);
  EXPECT_GE(c.memory_entries, 4u);
  EXPECT_LE(c.memory_entries, 5u);
  ASSERT_TRUE(cache.lookup(make_entry(20, 9000).key));  // the newest: in memory
  EXPECT_EQ(cache.counters().memory_hits, 1u);
  const auto oldest = cache.lookup(make_entry(1, 9000).key);  // dropped from memory: from the disk
  ASSERT_TRUE(oldest);
  expect_same(*oldest, make_entry(1, 9000));
  c = cache.counters();
  EXPECT_EQ(c.disk_hits, 1u);
  EXPECT_LE(c.memory_bytes, options.max_memory_bytes);
  cache.clear();
  EXPECT_EQ(cache.counters().memory_entries, 0u);
  EXPECT_EQ(cache.counters().memory_bytes, 0u);
}

TEST(KernelCache, StoreRejectsAnEntryWhoseKeyIsNotItsFields) {
  TempDir dir;
  KernelCache cache(options_for(dir.path(), nullptr));
  KernelEntry entry = make_entry(1);
  entry.flags = "+sse2";  // key still of "+avx2,+fma"
  EXPECT_NE(edb::testing::usage_error([&] { cache.store(entry); }).find("KernelCache::store"), std::string::npos);
  EXPECT_FALSE(cache.lookup(entry.key));
}

TEST(KernelCache, DefaultDirectoryComesFromTheEnvironment) {
  const char* old = std::getenv("EDB_CACHE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("EDB_CACHE_DIR", "/some/where", 1);
  EXPECT_EQ(KernelCache::default_directory(), "/some/where");
  ::unsetenv("EDB_CACHE_DIR");
  if (const char* home = std::getenv("HOME")) {
    EXPECT_EQ(KernelCache::default_directory(), std::string(home) + "/.cache/edbatch");
  }
  // Set but empty: no directory (memory only, said once), never the default in silence.
  ::setenv("EDB_CACHE_DIR", "", 1);
  EXPECT_EQ(KernelCache::default_directory(), "");
  std::vector<std::string> warnings;
  KernelCacheOptions options;
  options.warn = [&](const std::string& line) { warnings.push_back(line); };
  KernelCache memory_only(options);
  EXPECT_EQ(memory_only.directory(), "");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("EDB_CACHE_DIR is set but empty; keeping kernels in memory only"), std::string::npos)
      << warnings[0];
  ::unsetenv("EDB_CACHE_DIR");
  if (old) ::setenv("EDB_CACHE_DIR", saved.c_str(), 1);
}

// ---- corrupt files ----

struct Damage {
  std::string name;
  std::function<std::string(std::string)> apply;
  std::string problem;  // expected in the warning
};

TEST(KernelCache, ACorruptFileIsAWarningAndAMissAndTheNextStoreRepairsIt) {
  const std::vector<Damage> damages = {
      {"flipped byte", [](std::string b) { b[b.size() / 2] ^= 0x40; return b; }, "checksum"},
      {"truncated", [](std::string b) { return b.substr(0, b.size() - 9); }, "checksum"},
      {"tiny", [](std::string b) { return b.substr(0, 5); }, "truncated"},
      {"empty", [](std::string) { return std::string(); }, "truncated"},
      {"wrong magic", [](std::string b) { b[0] = 'X'; return b; }, "magic"},
      {"wrong version", [](std::string b) { b[8] = char(kKernelCacheFormatVersion + 1); return b; }, "format version"},
  };
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.name);
    TempDir dir;
    const KernelEntry entry = make_entry(3, 500);
    KernelCache(options_for(dir.path(), nullptr)).store(entry);
    const std::string path = dir.file(entry.key.hex() + ".kernel");
    write_file(path, damage.apply(read_file(path)));

    std::vector<std::string> warnings;
    KernelCache reader(options_for(dir.path(), &warnings));
    EXPECT_FALSE(reader.lookup(entry.key));
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find(path), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find(damage.problem), std::string::npos) << warnings[0];
    EXPECT_EQ(warnings[0].find('\n'), std::string::npos);
    EXPECT_EQ(reader.counters().misses, 1u);
    const auto verified = reader.verify();
    ASSERT_EQ(verified.size(), 1u);
    EXPECT_FALSE(verified[0].ok());
    EXPECT_TRUE(reader.list().empty());

    reader.store(entry);  // the caller recompiled
    KernelCache fresh(options_for(dir.path(), nullptr));
    const auto hit = fresh.lookup(entry.key);
    ASSERT_TRUE(hit);
    expect_same(*hit, entry);
    EXPECT_TRUE(fresh.verify()[0].ok());
    EXPECT_EQ(warnings.size(), 1u);
  }
}

TEST(KernelCache, AFileUnderTheWrongNameIsAMiss) {
  TempDir dir;
  const KernelEntry a = make_entry(1), b = make_entry(2);
  KernelCache(options_for(dir.path(), nullptr)).store(a);
  fs::copy_file(dir.file(a.key.hex() + ".kernel"), dir.file(b.key.hex() + ".kernel"));
  std::vector<std::string> warnings;
  KernelCache cache(options_for(dir.path(), &warnings));
  EXPECT_FALSE(cache.lookup(b.key));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("holds kernel " + a.key.hex()), std::string::npos) << warnings[0];
  EXPECT_TRUE(cache.lookup(a.key));
}

// ---- unusable directories ----

TEST(KernelCache, AnUncreatableDirectoryMeansMemoryOnlyWithOneWarning) {
  TempDir dir;
  write_file(dir.file("plain-file"), "x");
  const std::string cache_dir = dir.file("plain-file") + "/sub";  // cannot exist, even for root
  std::vector<std::string> warnings;
  KernelCache cache(options_for(cache_dir, &warnings));
  const KernelEntry a = make_entry(1), b = make_entry(2);
  EXPECT_FALSE(cache.lookup(a.key));
  cache.store(a);
  cache.store(b);
  EXPECT_TRUE(cache.lookup(a.key));
  EXPECT_TRUE(cache.lookup(b.key));
  EXPECT_FALSE(cache.disk_writable());
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(warnings);
  EXPECT_NE(warnings[0].find(cache_dir), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("memory only"), std::string::npos) << warnings[0];
  EXPECT_TRUE(cache.list().empty());
  EXPECT_TRUE(cache.verify().empty());
  EXPECT_EQ(cache.prune(0).removed, 0u);
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST(KernelCache, AReadOnlyDirectoryStillServesItsEntries) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes through chmod 0500; the uncreatable-directory test covers this";
  TempDir dir;
  const KernelEntry old_entry = make_entry(1), new_entry = make_entry(2);
  KernelCache(options_for(dir.path(), nullptr)).store(old_entry);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0500), 0);
  std::vector<std::string> warnings;
  {
    KernelCache cache(options_for(dir.path(), &warnings));
    EXPECT_TRUE(cache.lookup(old_entry.key));  // read-only fallback: the disk entry is found
    cache.store(new_entry);
    EXPECT_TRUE(cache.lookup(new_entry.key));  // from memory
    EXPECT_FALSE(cache.disk_writable());
  }
  ::chmod(dir.path().c_str(), 0700);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(dir.path()), std::string::npos) << warnings[0];
  EXPECT_FALSE(fs::exists(dir.file(new_entry.key.hex() + ".kernel")));
}

TEST(KernelCache, AnUnreadableFileIsAWarningAndAMiss) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads through chmod 0000";
  TempDir dir;
  const KernelEntry entry = make_entry(1);
  KernelCache(options_for(dir.path(), nullptr)).store(entry);
  const std::string path = dir.file(entry.key.hex() + ".kernel");
  ASSERT_EQ(::chmod(path.c_str(), 0000), 0);
  std::vector<std::string> warnings;
  KernelCache cache(options_for(dir.path(), &warnings));
  EXPECT_FALSE(cache.lookup(entry.key));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(path + ": unreadable"), std::string::npos) << warnings[0];
  cache.store(entry);  // rename replaces the unreadable file
  EXPECT_TRUE(KernelCache(options_for(dir.path(), nullptr)).lookup(entry.key));
}

// ---- two processes at once ----

// Stores and looks up shared keys (both processes) and own keys; returns the number of failures.
int hammer(const std::string& dir, int process, int rounds) {
  int failures = 0;
  std::vector<std::string> warnings;
  for (int round = 0; round < rounds; ++round) {
    KernelCache cache(options_for(dir, &warnings));
    const KernelEntry shared = make_entry(round % 8, 3000 + size_t(round % 8) * 100);
    const KernelEntry own = make_entry(100 * (process + 1) + round, 2000);
    cache.store(shared);
    cache.store(own);
    KernelCache reader(options_for(dir, &warnings));  // a fresh object reads the disk
    for (const KernelEntry* e : {&shared, &own}) {
      const auto hit = reader.lookup(e->key);
      if (!hit || hit->object != e->object || hit->description != e->description) ++failures;
    }
    if (reader.counters().disk_hits != 2) ++failures;
  }
  return failures + int(warnings.size());
}

TEST(KernelCache, TwoProcessesAtOnce) {
  TempDir dir;
  constexpr int kRounds = 60;
  std::vector<pid_t> children;
  for (int process = 0; process < 2; ++process) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(std::min(hammer(dir.path(), process, kRounds), 100));
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "failed lookups or warnings in child " << pid;
  }
  KernelCache cache(options_for(dir.path(), nullptr));
  const auto verified = cache.verify();
  EXPECT_EQ(verified.size(), size_t(8 + 2 * kRounds));
  for (const auto& v : verified) EXPECT_TRUE(v.ok()) << v.file << ": " << v.problem;
  for (int round = 0; round < kRounds; ++round)
    for (int id : {round % 8, 100 + round, 200 + round}) {
      const KernelEntry expected = make_entry(id, id < 8 ? 3000 + size_t(id) * 100 : 2000);
      const auto hit = cache.lookup(expected.key);
      ASSERT_TRUE(hit) << id;
      expect_same(*hit, expected);
    }
  const KernelCacheStats s = cache.stats();
  EXPECT_EQ(s.stores, uint64_t(2 * 2 * kRounds));  // counters are updated under the lock: none lost
  EXPECT_EQ(s.hits, uint64_t(2 * 2 * kRounds) + uint64_t(8 + 2 * kRounds));
  EXPECT_EQ(s.misses, 0u);
  for (const auto& f : fs::directory_iterator(dir.path()))
    EXPECT_FALSE(ir::is_temporary_name(f.path().filename().string())) << "left behind: " << f.path();
}

// Four threads, two on one KernelCache object and two on their own objects over the same
// directory, storing and looking up overlapping keys: every lookup after a store hits, nothing
// warns, every file is sound and the lifetime counters lose nothing.
TEST(KernelCache, FourThreadsOnOneDirectory) {
  TempDir dir;
  constexpr int kRounds = 40;
  KernelCache shared(options_for(dir.path(), nullptr));
  std::atomic<int> failures{0};
  auto work = [&](KernelCache& cache, int thread) {
    for (int round = 0; round < kRounds; ++round) {
      const KernelEntry common = make_entry(round % 8, 3000 + size_t(round % 8) * 100);
      const KernelEntry own = make_entry(1000 * (thread + 1) + round, 1500);
      cache.store(common);
      cache.store(own);
      for (const KernelEntry* e : {&common, &own}) {
        const auto hit = cache.lookup(e->key);
        if (!hit || hit->object != e->object) ++failures;
      }
    }
  };
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<KernelCache>> own;
  for (int t = 0; t < 4; ++t) {
    KernelCache* cache = &shared;
    if (t >= 2) cache = own.emplace_back(std::make_unique<KernelCache>(options_for(dir.path(), nullptr))).get();
    threads.emplace_back(work, std::ref(*cache), t);
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  KernelCache reader(options_for(dir.path(), nullptr));
  const auto verified = reader.verify();
  EXPECT_EQ(verified.size(), size_t(8 + 4 * kRounds));
  for (const auto& v : verified) EXPECT_TRUE(v.ok()) << v.file << ": " << v.problem;
  EXPECT_EQ(reader.stats().stores, uint64_t(4 * 2 * kRounds));
}

// ---- pruning ----

void tick() { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }  // distinct last-use times

TEST(KernelCache, PruneRemovesTheLeastRecentlyUsedFirst) {
  TempDir dir;
  std::vector<KernelEntry> entries;
  for (int id = 0; id < 4; ++id) {
    entries.push_back(make_entry(id, 4000));
    KernelCache(options_for(dir.path(), nullptr)).store(entries.back());
    tick();
  }
  EXPECT_TRUE(KernelCache(options_for(dir.path(), nullptr)).lookup(entries[0].key));  // 0 is now the newest
  tick();
  KernelCache cache(options_for(dir.path(), nullptr));
  const uint64_t file_bytes = fs::file_size(dir.file(entries[0].key.hex() + ".kernel"));
  const PruneResult pruned = cache.prune(2 * file_bytes);
  EXPECT_EQ(pruned.removed, 2u);
  EXPECT_EQ(pruned.bytes_freed, 2 * file_bytes);
  EXPECT_EQ(pruned.bytes_left, 2 * file_bytes);
  EXPECT_FALSE(fs::exists(dir.file(entries[1].key.hex() + ".kernel")));
  EXPECT_FALSE(fs::exists(dir.file(entries[1].key.hex() + ".meta")));
  EXPECT_FALSE(fs::exists(dir.file(entries[2].key.hex() + ".kernel")));
  EXPECT_TRUE(fs::exists(dir.file(entries[0].key.hex() + ".kernel")));
  EXPECT_TRUE(fs::exists(dir.file(entries[3].key.hex() + ".kernel")));
  const auto infos = cache.list();
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_EQ(infos[0].key, entries[0].key);  // most recently used first
  EXPECT_EQ(infos[1].key, entries[3].key);
  EXPECT_EQ(cache.prune(2 * file_bytes).removed, 0u);
  EXPECT_EQ(cache.prune(0).removed, 2u);
  EXPECT_EQ(cache.stats().entries, 0u);
}

// The size of the entry file that make_entry(0, object_bytes) makes.
uint64_t entry_file_bytes(size_t object_bytes) {
  TempDir probe;
  const KernelEntry e = make_entry(0, object_bytes);
  KernelCache(options_for(probe.path(), nullptr)).store(e);
  return fs::file_size(probe.file(e.key.hex() + ".kernel"));
}

TEST(KernelCache, StoresKeepTheDirectoryUnderTheCap) {
  TempDir dir;
  const uint64_t file_bytes = entry_file_bytes(4000);
  const uint64_t cap = file_bytes * 5 / 2;  // room for two entries
  KernelCache cache(options_for(dir.path(), nullptr, cap));
  std::vector<KernelEntry> entries;
  for (int id = 0; id < 6; ++id) {
    entries.push_back(make_entry(id, 4000));
    cache.store(entries.back());
    EXPECT_LE(cache.stats().total_bytes, cap) << "after store " << id;
    tick();
  }
  const auto infos = cache.list();
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_EQ(infos[0].key, entries[5].key);
  EXPECT_EQ(infos[1].key, entries[4].key);
  for (const KernelEntry& e : entries) EXPECT_TRUE(cache.lookup(e.key));  // memory keeps all of them
}

// A store counts the directory only every kStoresPerCount stores; what another writer adds in
// between is pruned at the next count.
TEST(KernelCache, EntriesAnotherWriterAddsArePrunedWithinACountsStores) {
  TempDir dir;
  const uint64_t file_bytes = entry_file_bytes(4000);
  const uint64_t cap = file_bytes * 10;
  KernelCache cache(options_for(dir.path(), nullptr, cap));
  cache.store(make_entry(0, 4000));  // counts the directory: one entry
  KernelCache other(options_for(dir.path(), nullptr));  // no cap of its own
  for (int id = 1; id <= 20; ++id) other.store(make_entry(id, 4000));
  EXPECT_GT(cache.stats().total_bytes, cap);
  // This object's own stores alone stay under the cap until its next count sees the rest.
  for (int id = 100; id < 100 + KernelCache::kStoresPerCount; ++id) cache.store(make_entry(id, 10));
  EXPECT_LE(cache.stats().total_bytes, cap);
}

TEST(KernelCache, ClearRemovesEverything) {
  TempDir dir;
  KernelCache cache(options_for(dir.path(), nullptr));
  for (int id = 0; id < 3; ++id) cache.store(make_entry(id));
  EXPECT_EQ(cache.clear().removed, 3u);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().stores, 0u);
  EXPECT_FALSE(cache.lookup(make_entry(0).key));  // memory is cleared too
}

// make_entry(id) as another build wrote it: the same kernel under that build's code identity.
KernelEntry entry_of_another_build(int id, size_t object_bytes = 4000) {
  KernelEntry e = make_entry(id, object_bytes);
  e.code = code_identity() + " (another build)";
  e.key = kernel_key(e.description, e.backend, e.target, e.flags, e.code);
  return e;
}

// Another build's entries are sound files that this build never looks up; stats counts them
// (files of another format version too) and pruning removes them before any of this build's.
TEST(KernelCache, AnotherBuildsEntriesAreNeverFoundAndArePrunedFirst) {
  TempDir dir;
  const KernelEntry mine = make_entry(1), old = make_entry(2), theirs = entry_of_another_build(1);
  ASSERT_NE(theirs.key, mine.key);
  KernelCache(options_for(dir.path(), nullptr)).store(old);
  tick();
  KernelCache(options_for(dir.path(), nullptr)).store(theirs);
  tick();
  KernelCache cache(options_for(dir.path(), nullptr));
  EXPECT_FALSE(cache.lookup(mine.key));  // the same kernel, cached by another build: a miss
  cache.store(mine);
  ASSERT_TRUE(cache.read(theirs.key));  // a sound file, for the tools
  expect_same(*cache.read(theirs.key), theirs);
  EXPECT_EQ(cache.read(theirs.key)->code, theirs.code);
  EXPECT_EQ(cache.read(mine.key)->code, code_identity());
  // An entry of an older format version: counted as another build's, pruned with them.
  const KernelEntry older = make_entry(3);
  cache.store(older);
  std::string bytes = read_file(cache.entry_path(older.key));
  bytes[8] = 1;
  write_file(cache.entry_path(older.key), bytes);

  const uint64_t file_bytes = fs::file_size(cache.entry_path(mine.key));
  KernelCacheStats s = cache.stats();
  EXPECT_EQ(s.entries, 4u);
  EXPECT_EQ(s.other_build_entries, 2u);
  EXPECT_EQ(s.other_build_bytes, fs::file_size(cache.entry_path(theirs.key)) + bytes.size());
  const auto infos = cache.list();  // sound entries only: the older version's file is not
  ASSERT_EQ(infos.size(), 3u);
  EXPECT_EQ(std::count_if(infos.begin(), infos.end(), [](const KernelInfo& i) { return i.code != code_identity(); }),
            1);

  // `old` was used least recently, yet the other builds' entries go first.
  const PruneResult pruned = cache.prune(2 * file_bytes);
  EXPECT_EQ(pruned.removed, 2u);
  EXPECT_FALSE(fs::exists(cache.entry_path(theirs.key)));
  EXPECT_FALSE(fs::exists(cache.entry_path(older.key)));
  EXPECT_TRUE(fs::exists(cache.entry_path(old.key)));
  EXPECT_TRUE(fs::exists(cache.entry_path(mine.key)));
  s = cache.stats();
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.other_build_entries, 0u);
  EXPECT_EQ(cache.prune(file_bytes).removed, 1u);  // then the least recently used
  EXPECT_TRUE(fs::exists(cache.entry_path(mine.key)));
}

// ---- the edb-cache tool ----

std::string edb_cache_binary() {
  if (const char* path = std::getenv("EDB_CACHE_BINARY")) return path;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  return (self.parent_path() / ".." / "tools" / "edb-cache").lexically_normal().string();
}

using Outcome = testing::ProgramRun;

Outcome run_tool(const std::string& args) { return testing::run_program(edb_cache_binary(), args); }

TEST(EdbCacheTool, CommandsOnARealDirectory) {
  if (!fs::exists(edb_cache_binary())) GTEST_SKIP() << "edb-cache not built at " << edb_cache_binary();
  TempDir dir;
  const KernelEntry a = make_entry(1, 4000), b = make_entry(2, 4000);
  {
    KernelCache cache(options_for(dir.path(), nullptr));
    cache.store(a);
    tick();
    cache.store(b);
  }
  const std::string d = " --dir '" + dir.path() + "'";

  Outcome o = run_tool("list --json" + d);
  ASSERT_EQ(o.status, 0) << o.err;
  nlohmann::json list = nlohmann::json::parse(o.out);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["hash"], b.key.hex());
  EXPECT_EQ(list[1]["signature"], "tanh f32[1,128]");

  o = run_tool("show " + a.key.hex() + " --json" + d);
  ASSERT_EQ(o.status, 0) << o.err;
  nlohmann::json shown = nlohmann::json::parse(o.out);
  EXPECT_EQ(shown["description"], a.description);
  EXPECT_EQ(shown["ir"], a.ir);
  EXPECT_EQ(shown["assembly"], a.assembly);
  o = run_tool("show " + a.key.hex() + d);
  EXPECT_EQ(o.status, 0);
  EXPECT_NE(o.out.find(a.ir), std::string::npos);

  o = run_tool("stats --json" + d);
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["entries"], 2);
  EXPECT_EQ(nlohmann::json::parse(o.out)["other_build_entries"], 0);
  KernelCache(options_for(dir.path(), nullptr)).store(entry_of_another_build(3));
  o = run_tool("stats" + d);
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("entries     3\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\nother build 1 ("), std::string::npos) << o.out;
  o = run_tool("list --json" + d);
  ASSERT_EQ(o.status, 0) << o.err;
  list = nlohmann::json::parse(o.out);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["code"], code_identity() + " (another build)");
  EXPECT_EQ(list[0]["this_build"], false);
  EXPECT_EQ(list[1]["this_build"], true);
  fs::remove(dir.file(entry_of_another_build(3).key.hex() + ".kernel"));

  EXPECT_EQ(run_tool("verify" + d).status, 0);
  const std::string path = dir.file(a.key.hex() + ".kernel");
  std::string bytes = read_file(path);
  bytes[100] ^= 1;
  write_file(path, bytes);
  o = run_tool("verify --json" + d);
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(nlohmann::json::parse(o.out)["bad"], 1);

  o = run_tool("prune --max-size 1K --json" + d);
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["removed"], 2);
  EXPECT_EQ(run_tool("clear" + d).status, 0);
}

// A directory whose every entry is damaged: list lists none and says how many it left out, exiting
// 1 as verify does (issue 45: "0 entries", exit 0). EDB_CACHE_DIR set but empty is an error naming
// it (it meant ~/.cache/edbatch in silence).
TEST(EdbCacheTool, ListCountsDamagedEntriesAndAnEmptyEdbCacheDirIsAnError) {
  if (!fs::exists(edb_cache_binary())) GTEST_SKIP() << "edb-cache not built at " << edb_cache_binary();
  TempDir dir;
  const KernelEntry a = make_entry(1, 4000), b = make_entry(2, 4000);
  {
    KernelCache cache(options_for(dir.path(), nullptr));
    cache.store(a);
    cache.store(b);
  }
  for (const KernelEntry* e : {&a, &b}) {
    const std::string path = dir.file(e->key.hex() + ".kernel");
    std::string bytes = read_file(path);
    bytes[100] ^= 1;
    write_file(path, bytes);
  }
  const std::string d = " --dir '" + dir.path() + "'";
  const std::string said = "edb-cache list: 2 damaged entry files in " + dir.path() +
                           " not listed (edb-cache verify names them)\n";
  Outcome o = run_tool("list" + d);
  EXPECT_EQ(o.status, 1);
  EXPECT_TRUE(o.out.ends_with("\n0 entries in " + dir.path() + "\n")) << o.out;
  EXPECT_EQ(o.err, said);
  o = run_tool("list --json" + d);
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(nlohmann::json::parse(o.out), nlohmann::json::array());
  EXPECT_EQ(o.err, said);
  o = run_tool("verify --json" + d);
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(nlohmann::json::parse(o.out)["bad"], 2);

  o = testing::run_program("/usr/bin/env", "EDB_CACHE_DIR= '" + edb_cache_binary() + "' list");
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err,
            "edb-cache: EDB_CACHE_DIR is set but empty: name a directory, unset it (for ~/.cache/edbatch), or pass "
            "--dir\n");
}

// A cache directory whose entries cannot be removed (read-only): clear and prune exit 1 naming a
// file they could not remove, and the entries stay (issue 31: "removed 0 entries", exit 0). Root
// removes through any mode, so as root the tool runs as nobody (setpriv).
TEST(EdbCacheTool, ClearAndPruneOnAReadOnlyDirectoryFailNamingAFile) {
  if (!fs::exists(edb_cache_binary())) GTEST_SKIP() << "edb-cache not built at " << edb_cache_binary();
  const bool root = ::geteuid() == 0;
  if (root && !fs::exists("/usr/bin/setpriv")) GTEST_SKIP() << "root, and no setpriv to run the tool as another user";
  TempDir dir;
  const KernelEntry a = make_entry(1, 4000), b = make_entry(2, 4000);
  {
    KernelCache cache(options_for(dir.path(), nullptr));
    cache.store(a);
    cache.store(b);
  }
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
  auto run_as_reader = [&](const std::string& args) {
    const std::string tool = "'" + edb_cache_binary() + "' " + args + " --dir '" + dir.path() + "'";
    return root ? testing::run_program("/usr/bin/setpriv", "--reuid=65534 --regid=65534 --clear-groups " + tool)
                : testing::run_program("/bin/sh", "-c \"" + tool + "\"");
  };
  for (const char* command : {"clear", "prune --max-size 1K"}) {
    const Outcome o = run_as_reader(command);
    EXPECT_EQ(o.status, 1) << command << ": " << o.out << o.err;
    const std::string first = std::string(command).substr(0, 5);
    EXPECT_NE(o.err.find("edb-cache " + first + ": could not remove "), std::string::npos) << o.err;
    EXPECT_NE(o.err.find(dir.path() + "/"), std::string::npos) << o.err;
    // The first file it could not remove, whichever the directory lists first (a kernel or the
    // counters file).
    EXPECT_NE(o.err.find(": Permission denied"), std::string::npos) << o.err;
  }
  ::chmod(dir.path().c_str(), 0755);
  KernelCache cache(options_for(dir.path(), nullptr));
  EXPECT_TRUE(cache.lookup(a.key));
  EXPECT_TRUE(cache.lookup(b.key));
}

TEST(EdbCacheTool, BadInvocationsFailWithOneLine) {
  if (!fs::exists(edb_cache_binary())) GTEST_SKIP() << "edb-cache not built at " << edb_cache_binary();
  TempDir dir;
  const std::string d = " --dir '" + dir.path() + "'";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "which command"},
      {"frobnicate" + d, "unknown command 'frobnicate'"},
      {"list --frob" + d, "unknown flag --frob"},
      {"show 1234" + d, "32 hex digits"},
      {"show " + std::string(32, 'a') + d, "no kernel"},
      {"show" + d, "which HASH"},
      {"prune" + d, "--max-size"},
      {"prune --max-size 12Q" + d, "--max-size"},
      {"list --max-size 1" + d, "belongs to prune"},
      {"list extra" + d, "unexpected argument"},
      {"clear --dir /dev/null", "the cache directory '/dev/null' is not a directory"},
      {"list --dir '" + dir.file("file") + "'", "the cache directory '" + dir.file("file") + "' is not a directory"},
  };
  testing::write_file(dir.file("file"), "not a cache\n");
  for (const auto& [args, expected] : cases) {
    const Outcome o = run_tool(args);
    EXPECT_EQ(o.status, 2) << args;
    EXPECT_EQ(o.out, "") << args;
    EXPECT_NE(o.err.find(expected), std::string::npos) << args << ": " << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << args << ": " << o.err;
  }
  const Outcome help = run_tool("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("prune --max-size"), std::string::npos);
}

}  // namespace
}  // namespace edb::jit
