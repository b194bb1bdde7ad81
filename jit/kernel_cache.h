// The kernel cache: compiled kernels by exact 128-bit key, in memory and on disk. Compiling and
// linking kernels is the JIT's job; this file only keys, stores, finds, checks and prunes them.
#pragma once

#include <atomic>
#include <compare>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ir/bounded_cache.h"

namespace edb::jit {

// Bump when the file layout or the key recipe changes: every old key and file then misses.
// Version 2: the code identity in the key and the file.
inline constexpr uint32_t kKernelCacheFormatVersion = 2;

// The identity of the code that generates kernels in this build: a hash of jit/'s and nvrtc/'s
// sources and the LLVM version, computed by the build (cmake/CodeIdentity.cmake), never bumped by
// hand. Every key holds it, so a kernel cached by another build (an older code generator) misses.
const std::string& code_identity();

// 128-bit xxh3 of the canonical kernel text plus everything that changes the code. The same 32
// lowercase hex digits name the kernel's symbol, its cache file and every log line about it.
struct KernelKey {
  uint64_t high = 0, low = 0;

  std::string hex() const;                                      // 32 lowercase hex digits
  std::string symbol() const { return "edb_kernel_" + hex(); }  // the JIT's function name
  static std::optional<KernelKey> from_hex(const std::string& text);  // nullopt unless 32 hex
  static KernelKey parse(const std::string& text);                    // UsageError unless 32 hex
  auto operator<=>(const KernelKey&) const = default;
};

// KernelKey's hash, for unordered containers (its bits are already a hash).
struct KernelKeyHash {
  size_t operator()(const KernelKey& key) const { return size_t(key.low ^ key.high); }
};

// The key of a kernel; fields are length-prefixed before hashing, so no two inputs collide by
// concatenation. `code` is the generating build's code_identity(): only tests and tools name
// another. Throws UsageError when the description or backend is empty.
KernelKey kernel_key(const std::string& description, const std::string& backend, const std::string& target,
                     const std::string& flags, const std::string& code = code_identity(),
                     uint32_t format_version = kKernelCacheFormatVersion);

// One compiled kernel. `key` must equal kernel_key(description, backend, target, flags, code).
struct KernelEntry {
  KernelKey key;
  std::string description;  // canonical kernel text; its first line is the batch signature
  std::string backend;      // "llvm", "cuda", ...
  std::string target;       // target CPU or GPU architecture
  std::string flags;        // code-generation flags (features, optimisation level)
  double compile_ms = 0;
  std::string object;    // compiled object bytes
  std::string ir;        // optional LLVM IR text, for `edb-cache show`
  std::string assembly;  // optional assembly text, for `edb-cache show`
  std::string code = code_identity();  // the build that generated it (code_identity() there)
};

// One disk entry as `list` shows it.
struct KernelInfo {
  KernelKey key;
  std::string signature;  // the description's first line
  std::string backend, target, flags;
  std::string code;  // the generating build's code_identity()
  uint64_t bytes = 0;  // size of the entry file
  double compile_ms = 0;
  uint64_t hits = 0;          // times a process found it on disk
  int64_t last_used_ms = 0;   // Unix time in ms of the last store or disk hit
};

// Directory totals; hits and misses are lifetime counts over every process that used it.
struct KernelCacheStats {
  std::string directory;
  uint64_t entries = 0, total_bytes = 0, max_bytes = 0;
  // Of those, entries another build wrote (another code identity or format version): never
  // loaded by this build, and the first to go when pruning.
  uint64_t other_build_entries = 0, other_build_bytes = 0;
  uint64_t hits = 0, misses = 0, stores = 0;
};

// This object's own counts: every lookup, memory hits included.
struct KernelCacheCounters {
  uint64_t memory_hits = 0, disk_hits = 0, misses = 0, stores = 0;
  uint64_t memory_entries = 0, memory_bytes = 0;  // held in memory now (at most max_memory_bytes)
  uint64_t memory_evictions = 0;                  // entries dropped from memory for the cap
};

struct VerifyResult {
  std::string file;     // path of the entry file
  std::string problem;  // empty when the entry is sound
  bool ok() const { return problem.empty(); }
};

struct PruneResult {
  uint64_t removed = 0, bytes_freed = 0, bytes_left = 0;
  uint64_t failed = 0;  // entries that could not be removed (a read-only directory)
  std::string failure;  // the first of them: its path and why
};

struct KernelCacheOptions {
  std::string directory;                     // empty: $EDB_CACHE_DIR, else $HOME/.cache/edbatch
  uint64_t max_bytes = uint64_t{256} << 20;  // disk cap, enforced by LRU pruning after each store
  // Entries kept in memory (their object code and texts), oldest stored first out past this cap;
  // a dropped entry is read from the disk again when asked for. The LLVM backend keeps the code
  // it linked on its own.
  uint64_t max_memory_bytes = uint64_t{64} << 20;
  std::function<void(const std::string&)> warn;  // one line per call; default: stderr
};

// Disk layout: DIR/HASH.kernel (magic, version, the code identity, header fields, sections, xxh3_64
// checksum of all before it), written by ir/files.h's durable writer (a temp file unique to the
// writer, flushed and renamed into place), so readers see whole files and two processes storing
// one key both succeed. Entries of other builds stay until pruning, which removes them first.
// DIR/HASH.meta (hits, last use) and DIR/counters are
// small text files rewritten the same way under flock(DIR/.lock), so counts from concurrent
// processes add up. A bad entry file is a warning and a miss, and the next store replaces it. An
// uncreatable or unwritable directory is one warning, then the cache runs from memory (reading
// whatever the directory still offers). Nothing here throws for a disk problem. Thread-safe.
class KernelCache {
 public:
  explicit KernelCache(KernelCacheOptions options = {});

  // $EDB_CACHE_DIR (set but empty: "", no directory, never the default silently), else
  // $HOME/.cache/edbatch, else "".
  static std::string default_directory();
  const std::string& directory() const { return directory_; }
  std::string entry_path(const KernelKey& key) const;

  // Memory, then disk. A disk hit is kept in memory and counted in the entry's metadata.
  std::optional<KernelEntry> lookup(const KernelKey& key);
  // Keeps the entry in memory and writes it to disk, then prunes to max_bytes. The directory's
  // total is counted by a scan on the first store and every kStoresPerCount stores after (other
  // processes write there too), and in between by adding what this object stored: a scan stats
  // every entry file, milliseconds for a directory of thousands.
  // Throws UsageError when entry.key is not the key of its fields.
  void store(const KernelEntry& entry);
  static constexpr int kStoresPerCount = 32;

  // For tools: the disk entry without counting a use; on failure `problem` says why ("" = absent).
  std::optional<KernelEntry> read(const KernelKey& key, std::string* problem = nullptr) const;
  // Sound disk entries, most recently used first; `damaged` counts the entry files left out (they
  // do not read: verify() names them).
  std::vector<KernelInfo> list(size_t* damaged = nullptr) const;
  std::vector<VerifyResult> verify() const;   // every entry file, sorted by name
  KernelCacheStats stats() const;
  KernelCacheCounters counters() const;
  uint64_t max_memory_bytes() const { return max_memory_bytes_; }
  // Until the total is at most max_bytes: other builds' entries first, then the least recently used.
  PruneResult prune(uint64_t max_bytes);
  PruneResult clear();  // memory and disk; `removed`: the entry files removed
  bool disk_writable() const;

 private:
  void warn_once(const std::string& message) const;
  bool ensure_directory() const;
  bool write_atomically(const std::string& path, const std::string& contents, bool sync) const;
  void record_use(const KernelKey* key, bool hit, bool stored);  // metadata, under the dir lock
  PruneResult prune_locked(uint64_t max_bytes);
  void keep_in_memory_locked(const KernelEntry& entry);  // under mutex_
  bool over_max_bytes_after(uint64_t stored_bytes);  // store()'s count of the directory

  std::string directory_;
  uint64_t max_bytes_;
  std::function<void(const std::string&)> warn_;
  mutable std::mutex mutex_;
  // At most max_memory_bytes_, the least recently used out first; memory_cleared_: the entries
  // clear() dropped, which memory_'s evictions count and KernelCacheCounters' do not.
  ir::BoundedCache<KernelKey, KernelEntry, KernelKeyHash> memory_;
  int64_t memory_cleared_ = 0;
  uint64_t max_memory_bytes_;
  KernelCacheCounters counters_;
  // The entry files' bytes as last counted plus this object's stores since (-1: not counted yet),
  // and the stores since that count; under mutex_.
  int64_t disk_bytes_ = -1;
  int stores_since_count_ = 0;
  mutable std::atomic<bool> disk_failed_{false};  // set by the first failed write; later writes skip disk
};

}  // namespace edb::jit
