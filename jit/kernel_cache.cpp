// The kernel cache's keys (xxh3-128), file format (xxh3-64 checksum) and directory upkeep. Disk
// trouble never throws: it becomes one warning and a miss, or memory-only operation.
#include "jit/kernel_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <utility>

#include <edbatch/errors.h>

#include <llvm/ADT/ArrayRef.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Support/xxhash.h>

#include "ir/files.h"

namespace edb::jit {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'E', 'D', 'B', 'K', 'E', 'R', 'N', 'L'};
constexpr size_t kChecksumBytes = 8;
constexpr int64_t kStaleTempMs = 60 * 1000;  // older temp files belong to a crashed writer
const char* const kWarningPrefix = "edbatch kernel cache: warning: ";

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string hex64(uint64_t value) {
  static const char digits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) out[size_t(i)] = digits[value & 15];
  return out;
}

// ---- the entry file: little-endian integers, length-prefixed strings ----

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void put_field(std::string& out, const std::string& s) {  // header fields: 32-bit length
  if (s.size() > UINT32_MAX) throw UsageError("KernelCache::store: a header field exceeds 4 GiB");
  put_u32(out, uint32_t(s.size()));
  out += s;
}
void put_section(std::string& out, const std::string& s) {  // payload sections: 64-bit length
  put_u64(out, s.size());
  out += s;
}

class Reader {
 public:
  Reader(const std::string& bytes, size_t begin, size_t end) : bytes_(bytes), at_(begin), end_(end) {}
  bool u32(uint32_t& v) { return integer(v, 4); }
  bool u64(uint64_t& v) { return integer(v, 8); }
  bool field(std::string& s) {
    uint32_t n = 0;
    return u32(n) && take(s, n);
  }
  bool section(std::string& s) {
    uint64_t n = 0;
    return u64(n) && take(s, n);
  }
  bool at_end() const { return at_ == end_; }

 private:
  template <typename T>
  bool integer(T& v, int width) {
    if (end_ - at_ < size_t(width)) return false;
    v = 0;
    for (int i = 0; i < width; ++i) v |= T(uint8_t(bytes_[at_ + size_t(i)])) << (8 * i);
    at_ += size_t(width);
    return true;
  }
  bool take(std::string& s, uint64_t n) {
    if (n > end_ - at_) return false;
    s.assign(bytes_, at_, size_t(n));
    at_ += size_t(n);
    return true;
  }
  const std::string& bytes_;
  size_t at_, end_;
};

uint64_t checksum(const std::string& bytes, size_t length) {
  return llvm::xxh3_64bits(llvm::StringRef(bytes.data(), length));
}

std::string serialize(const KernelEntry& e) {
  std::string out(kMagic, sizeof kMagic);
  put_u32(out, kKernelCacheFormatVersion);
  put_field(out, e.code);  // first, so that other_build() reads only the head of a file
  put_field(out, e.key.hex());
  put_field(out, e.description);
  put_field(out, e.backend);
  put_field(out, e.target);
  put_field(out, e.flags);
  put_u64(out, std::bit_cast<uint64_t>(e.compile_ms));
  put_section(out, e.object);
  put_section(out, e.ir);
  put_section(out, e.assembly);
  put_u64(out, checksum(out, out.size()));
  return out;
}

// The entry in `bytes`, or nullopt with `problem` set to what is wrong.
std::optional<KernelEntry> parse(const std::string& bytes, std::string& problem) {
  if (bytes.size() < sizeof kMagic + 4 + kChecksumBytes) {
    problem = "truncated (" + std::to_string(bytes.size()) + " bytes)";
    return std::nullopt;
  }
  if (bytes.compare(0, sizeof kMagic, kMagic, sizeof kMagic) != 0) {
    problem = "bad magic (not a kernel cache file)";
    return std::nullopt;
  }
  const size_t body = bytes.size() - kChecksumBytes;
  Reader header(bytes, sizeof kMagic, body);
  uint32_t version = 0;
  header.u32(version);
  if (version != kKernelCacheFormatVersion) {
    problem = "format version " + std::to_string(version) + ", expected " + std::to_string(kKernelCacheFormatVersion);
    return std::nullopt;
  }
  uint64_t stored = 0;
  Reader(bytes, body, bytes.size()).u64(stored);
  if (stored != checksum(bytes, body)) {
    problem = "checksum mismatch (corrupt or truncated)";
    return std::nullopt;
  }
  KernelEntry e;
  std::string hex;
  uint64_t compile_bits = 0;
  if (!(header.field(e.code) && header.field(hex) && header.field(e.description) && header.field(e.backend) &&
        header.field(e.target) && header.field(e.flags) && header.u64(compile_bits) && header.section(e.object) &&
        header.section(e.ir) && header.section(e.assembly) && header.at_end())) {
    problem = "malformed fields despite a good checksum";
    return std::nullopt;
  }
  e.compile_ms = std::bit_cast<double>(compile_bits);
  const std::optional<KernelKey> key = KernelKey::from_hex(hex);
  if (!key || *key != kernel_key(e.description, e.backend, e.target, e.flags, e.code)) {
    problem = "stored key '" + hex + "' is not the key of its fields";
    return std::nullopt;
  }
  e.key = *key;
  return e;
}

// Whether the entry file at `path` was written by another build: another format version or code
// identity (or no header at all). Reads only the head of the file; the rest is not checked.
bool other_build(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  std::string head(sizeof kMagic + 8 + code_identity().size(), '\0');
  size_t done = 0;
  while (done < head.size()) {
    const ssize_t n = ::read(fd, head.data() + done, head.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  ::close(fd);
  if (done < head.size() || head.compare(0, sizeof kMagic, kMagic, sizeof kMagic) != 0) return true;
  Reader reader(head, sizeof kMagic, head.size());
  uint32_t version = 0;
  std::string code;
  const bool this_build =
      reader.u32(version) && version == kKernelCacheFormatVersion && reader.field(code) && code == code_identity();
  return !this_build;
}

// ---- small files and the directory lock ----

bool read_whole(const std::string& path, std::string& out, int& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = errno;
    return false;
  }
  out.clear();
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno;
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buffer, size_t(n));
  }
  ::close(fd);
  return true;
}

// "name value" lines; missing names read as 0.
std::map<std::string, int64_t> read_numbers(const std::string& path) {
  std::map<std::string, int64_t> numbers;
  std::string text;
  int error = 0;
  if (!read_whole(path, text, error)) return numbers;
  std::istringstream in(text);
  std::string name;
  int64_t value = 0;
  while (in >> name >> value) numbers[name] = value;
  return numbers;
}

std::string write_numbers(const std::map<std::string, int64_t>& numbers) {
  std::string text;
  for (const auto& [name, value] : numbers) text += name + " " + std::to_string(value) + "\n";
  return text;
}

// flock(DIR/.lock) for read-modify-write of metadata and for pruning; other processes wait. A
// directory the lock file cannot be made in (read-only) is worked on unlocked.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& directory) : lock_(directory + "/.lock") {}

 private:
  ir::FileLock lock_;
};

struct DiskFile {
  std::string path, name;
  uint64_t bytes = 0;
  int64_t mtime_ms = 0;
};

int64_t mtime_ms(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return 0;
  return int64_t(info.st_mtim.tv_sec) * 1000 + info.st_mtim.tv_nsec / 1000000;
}

// Regular files in `directory` whose names end in `suffix` (all when empty), sorted by name.
std::vector<DiskFile> scan(const std::string& directory, const std::string& suffix) {
  std::vector<DiskFile> files;
  std::error_code ec;
  if (directory.empty()) return files;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_error;
    if (!it->is_regular_file(type_error)) continue;
    const std::string name = it->path().filename().string();
    if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    DiskFile f{it->path().string(), name, 0, mtime_ms(it->path().string())};
    std::error_code size_error;
    f.bytes = it->file_size(size_error);
    files.push_back(f);
  }
  std::sort(files.begin(), files.end(), [](const DiskFile& a, const DiskFile& b) { return a.name < b.name; });
  return files;
}

std::string stem(const std::string& name) { return name.substr(0, name.rfind('.')); }

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

// ---- KernelKey ----

std::string KernelKey::hex() const { return hex64(high) + hex64(low); }

std::optional<KernelKey> KernelKey::from_hex(const std::string& text) {
  if (text.size() != 32) return std::nullopt;
  KernelKey key;
  for (size_t i = 0; i < 32; ++i) {
    const char c = text[i];
    uint64_t digit = 0;
    if (c >= '0' && c <= '9') digit = uint64_t(c - '0');
    else if (c >= 'a' && c <= 'f') digit = uint64_t(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') digit = uint64_t(c - 'A' + 10);
    else return std::nullopt;
    uint64_t& half = i < 16 ? key.high : key.low;
    half = (half << 4) | digit;
  }
  return key;
}

KernelKey KernelKey::parse(const std::string& text) {
  if (auto key = from_hex(text)) return *key;
  throw UsageError("KernelKey::parse: expected 32 hex digits, got '" + text + "'");
}

KernelKey kernel_key(const std::string& description, const std::string& backend, const std::string& target,
                     const std::string& flags, const std::string& code, uint32_t format_version) {
  if (description.empty()) throw UsageError("kernel_key: the kernel description is empty");
  if (backend.empty()) throw UsageError("kernel_key: the backend name is empty");
  std::string text = "edbatch kernel key\n";
  auto field = [&](const char* name, const std::string& value) {
    text += std::string(name) + " " + std::to_string(value.size()) + "\n" + value + "\n";
  };
  field("version", std::to_string(format_version));
  field("backend", backend);
  field("target", target);
  field("flags", flags);
  field("code", code);
  field("description", description);
  const llvm::XXH128_hash_t hash =
      llvm::xxh3_128bits(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  return KernelKey{hash.high64, hash.low64};
}

// ---- KernelCache ----

KernelCache::KernelCache(KernelCacheOptions options)
    : directory_(options.directory.empty() ? default_directory() : options.directory),
      max_bytes_(options.max_bytes),
      warn_(std::move(options.warn)),
      memory_(SIZE_MAX, std::max<uint64_t>(options.max_memory_bytes, 1)),
      max_memory_bytes_(options.max_memory_bytes) {
  if (!warn_) warn_ = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  if (directory_.empty())
    warn_once(std::getenv("EDB_CACHE_DIR") ? "EDB_CACHE_DIR is set but empty; keeping kernels in memory only (name a "
                                             "directory, or unset it for ~/.cache/edbatch)"
                                           : "no cache directory (EDB_CACHE_DIR and HOME unset); keeping kernels in "
                                             "memory only");
}

std::string KernelCache::default_directory() {
  if (const char* dir = std::getenv("EDB_CACHE_DIR")) return dir;  // set but empty: no directory, said once
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/edbatch";
  return "";
}

std::string KernelCache::entry_path(const KernelKey& key) const { return directory_ + "/" + key.hex() + ".kernel"; }

bool KernelCache::disk_writable() const { return !directory_.empty() && !disk_failed_; }

void KernelCache::warn_once(const std::string& message) const {
  if (!disk_failed_.exchange(true)) warn_(kWarningPrefix + message);
}

bool KernelCache::ensure_directory() const {
  if (!disk_writable()) return false;
  std::error_code ec;
  fs::create_directories(directory_, ec);
  if (ec || !fs::is_directory(directory_, ec)) {
    warn_once("cannot create " + directory_ + ": " + (ec ? ec.message() : "not a directory") +
              "; keeping kernels in memory only");
    return false;
  }
  return true;
}

bool KernelCache::write_atomically(const std::string& path, const std::string& contents, bool sync) const {
  // Every writer of an entry writes the same bytes, and metadata is written under the directory's
  // lock: no lock of its own. Hit counts may be lost in a crash; entries are flushed to the disk.
  const std::string why = ir::write_file(path, contents, {.lock = false, .sync = sync});
  if (why.empty()) return true;
  warn_once(why + "; keeping kernels in memory only");
  return false;
}

void KernelCache::record_use(const KernelKey* key, bool hit, bool stored) {
  if (!ensure_directory()) return;
  DirectoryLock lock(directory_);
  const std::string counters_path = directory_ + "/counters";
  std::map<std::string, int64_t> totals = read_numbers(counters_path);
  totals["hits"] += hit ? 1 : 0;
  totals["misses"] += key ? 0 : 1;
  totals["stores"] += stored ? 1 : 0;
  if (!write_atomically(counters_path, write_numbers(totals), false)) return;
  if (!key) return;
  const std::string meta_path = directory_ + "/" + key->hex() + ".meta";
  std::map<std::string, int64_t> meta = read_numbers(meta_path);
  meta["hits"] += hit ? 1 : 0;
  meta["last_used_ms"] = now_ms();
  write_atomically(meta_path, write_numbers(meta), false);
}

std::optional<KernelEntry> KernelCache::lookup(const KernelKey& key) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (const KernelEntry* kept = memory_.find(key)) {
      ++counters_.memory_hits;
      return *kept;
    }
  }
  std::string problem;
  std::optional<KernelEntry> entry = read(key, &problem);
  if (!problem.empty()) warn_(kWarningPrefix + entry_path(key) + ": " + problem + "; recompiling " + key.hex());
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (entry) {
      keep_in_memory_locked(*entry);
      ++counters_.disk_hits;
    } else {
      ++counters_.misses;
    }
  }
  if (entry) record_use(&key, /*hit=*/true, /*stored=*/false);
  else record_use(nullptr, false, false);
  return entry;
}

void KernelCache::store(const KernelEntry& entry) {
  const KernelKey expected = kernel_key(entry.description, entry.backend, entry.target, entry.flags, entry.code);
  if (entry.key != expected)
    throw UsageError("KernelCache::store: entry key " + entry.key.hex() +
                     " is not the key of its description, backend, target, flags and code (" + expected.hex() + ")");
  {
    std::lock_guard<std::mutex> guard(mutex_);
    keep_in_memory_locked(entry);
    ++counters_.stores;
  }
  if (!ensure_directory()) return;
  const std::string bytes = serialize(entry);
#ifndef NDEBUG
  std::string problem;
  if (!parse(bytes, problem)) throw InternalError("KernelCache::store: a serialized entry does not parse: " + problem);
#endif
  if (!write_atomically(entry_path(entry.key), bytes, true)) return;
  record_use(&entry.key, /*hit=*/false, /*stored=*/true);
  if (disk_writable() && over_max_bytes_after(bytes.size())) prune(max_bytes_);
}

bool KernelCache::over_max_bytes_after(uint64_t stored_bytes) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (disk_bytes_ >= 0 && ++stores_since_count_ < kStoresPerCount) {
      disk_bytes_ += int64_t(stored_bytes);  // an entry stored again is counted twice: a count comes sooner
      return uint64_t(disk_bytes_) > max_bytes_;
    }
  }
  uint64_t total = 0;
  for (const DiskFile& f : scan(directory_, ".kernel")) total += f.bytes;
  std::lock_guard<std::mutex> guard(mutex_);
  disk_bytes_ = int64_t(total);
  stores_since_count_ = 0;
  return total > max_bytes_;
}

std::optional<KernelEntry> KernelCache::read(const KernelKey& key, std::string* problem) const {
  std::string scratch;
  std::string& why = problem ? *problem : scratch;
  why.clear();
  if (directory_.empty()) return std::nullopt;
  std::string bytes;
  int error = 0;
  if (!read_whole(entry_path(key), bytes, error)) {
    if (error != ENOENT && error != ENOTDIR) why = std::string("unreadable: ") + std::strerror(error);
    return std::nullopt;
  }
  std::optional<KernelEntry> entry = parse(bytes, why);
  if (entry && entry->key != key) {
    why = "holds kernel " + entry->key.hex() + ", not " + key.hex();
    return std::nullopt;
  }
  return entry;
}

std::vector<KernelInfo> KernelCache::list(size_t* damaged) const {
  std::vector<KernelInfo> infos;
  if (damaged) *damaged = 0;
  for (const DiskFile& f : scan(directory_, ".kernel")) {
    const std::optional<KernelKey> key = KernelKey::from_hex(stem(f.name));
    std::optional<KernelEntry> entry;
    if (key && key->hex() == stem(f.name)) entry = read(*key);
    if (!entry) {  // as verify() counts it
      if (damaged) ++*damaged;
      continue;
    }
    std::map<std::string, int64_t> meta = read_numbers(directory_ + "/" + key->hex() + ".meta");
    KernelInfo info;
    info.key = *key;
    info.signature = first_line(entry->description);
    info.backend = entry->backend;
    info.target = entry->target;
    info.flags = entry->flags;
    info.code = entry->code;
    info.bytes = f.bytes;
    info.compile_ms = entry->compile_ms;
    info.hits = uint64_t(std::max<int64_t>(0, meta["hits"]));
    info.last_used_ms = meta.count("last_used_ms") ? meta["last_used_ms"] : f.mtime_ms;
    infos.push_back(info);
  }
  std::stable_sort(infos.begin(), infos.end(),
                   [](const KernelInfo& a, const KernelInfo& b) { return a.last_used_ms > b.last_used_ms; });
  return infos;
}

std::vector<VerifyResult> KernelCache::verify() const {
  std::vector<VerifyResult> results;
  for (const DiskFile& f : scan(directory_, ".kernel")) {
    VerifyResult result{f.path, ""};
    if (const std::optional<KernelKey> key = KernelKey::from_hex(stem(f.name)); !key || key->hex() != stem(f.name))
      result.problem = "name is not a lowercase HASH.kernel";
    else
      read(*key, &result.problem);
    results.push_back(result);
  }
  return results;
}

KernelCacheStats KernelCache::stats() const {
  KernelCacheStats s;
  s.directory = directory_;
  s.max_bytes = max_bytes_;
  for (const DiskFile& f : scan(directory_, ".kernel")) {
    ++s.entries;
    s.total_bytes += f.bytes;
    if (other_build(f.path)) {
      ++s.other_build_entries;
      s.other_build_bytes += f.bytes;
    }
  }
  std::map<std::string, int64_t> totals = read_numbers(directory_ + "/counters");
  s.hits = uint64_t(std::max<int64_t>(0, totals["hits"]));
  s.misses = uint64_t(std::max<int64_t>(0, totals["misses"]));
  s.stores = uint64_t(std::max<int64_t>(0, totals["stores"]));
  return s;
}

namespace {
uint64_t memory_footprint(const KernelEntry& e) {
  return e.description.size() + e.backend.size() + e.target.size() + e.flags.size() + e.code.size() + e.object.size() +
         e.ir.size() + e.assembly.size() + sizeof e;
}
}  // namespace

void KernelCache::keep_in_memory_locked(const KernelEntry& entry) {
  // The least recently used out first, the newest always kept (it is about to be used).
  memory_.insert(entry.key, entry, memory_footprint(entry));
}

KernelCacheCounters KernelCache::counters() const {
  std::lock_guard<std::mutex> guard(mutex_);
  KernelCacheCounters counters = counters_;
  counters.memory_entries = memory_.size();
  counters.memory_bytes = memory_.bytes();
  counters.memory_evictions = uint64_t(memory_.evictions() - memory_cleared_);
  return counters;
}

PruneResult KernelCache::prune(uint64_t max_bytes) {
  if (directory_.empty() || !fs::is_directory(directory_)) return {};
  DirectoryLock lock(directory_);
  const PruneResult result = prune_locked(max_bytes);
  std::lock_guard<std::mutex> guard(mutex_);
  disk_bytes_ = int64_t(result.bytes_left);  // counted now
  stores_since_count_ = 0;
  return result;
}

PruneResult KernelCache::prune_locked(uint64_t max_bytes) {
  struct Candidate {
    DiskFile file;
    bool this_build;  // false: never loaded here, so removed before any of this build's
    int64_t last_used_ms;
  };
  std::vector<Candidate> candidates;
  PruneResult result;
  for (const DiskFile& f : scan(directory_, ".kernel")) {
    std::map<std::string, int64_t> meta = read_numbers(directory_ + "/" + stem(f.name) + ".meta");
    candidates.push_back({f, !other_build(f.path), meta.count("last_used_ms") ? meta["last_used_ms"] : f.mtime_ms});
    result.bytes_left += f.bytes;
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::pair(a.this_build, a.last_used_ms) < std::pair(b.this_build, b.last_used_ms);
  });
  for (const Candidate& c : candidates) {
    if (result.bytes_left <= max_bytes) break;
    std::error_code ec;
    if (!fs::remove(c.file.path, ec) || ec) {
      if (!result.failed++) result.failure = c.file.path + ": " + (ec ? ec.message() : "not removed");
      continue;
    }
    fs::remove(directory_ + "/" + stem(c.file.name) + ".meta", ec);
    ++result.removed;
    result.bytes_freed += c.file.bytes;
    result.bytes_left -= c.file.bytes;
  }
  // Leftovers: metadata whose entry is gone, and temp files of writers that died mid-write.
  const int64_t now = now_ms();
  for (const DiskFile& f : scan(directory_, "")) {
    std::error_code ec;
    if (f.name.ends_with(".meta") && !fs::exists(directory_ + "/" + stem(f.name) + ".kernel", ec))
      fs::remove(f.path, ec);
    else if (ir::is_temporary_name(f.name) && now - f.mtime_ms > kStaleTempMs)
      fs::remove(f.path, ec);
  }
  return result;
}

PruneResult KernelCache::clear() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    memory_cleared_ += int64_t(memory_.size());
    memory_.clear();
    disk_bytes_ = -1;
  }
  PruneResult result;
  if (directory_.empty() || !fs::is_directory(directory_)) return result;
  DirectoryLock lock(directory_);
  const int64_t now = now_ms();
  for (const DiskFile& f : scan(directory_, "")) {
    std::error_code ec;
    const bool stale_temp = ir::is_temporary_name(f.name) && now - f.mtime_ms > kStaleTempMs;
    if (!(f.name.ends_with(".kernel") || f.name.ends_with(".meta") || f.name == "counters" || stale_temp)) continue;
    if (fs::remove(f.path, ec) && !ec) {
      if (f.name.ends_with(".kernel")) ++result.removed;
    } else if (!result.failed++) {
      result.failure = f.path + ": " + (ec ? ec.message() : "not removed");
    }
  }
  return result;
}

}  // namespace edb::jit
