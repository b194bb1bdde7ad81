// The project's files, read and written in one place. Before a file a user names is read whole (a
// model, an optimizer state, a policy): a directory, a device or pipe, a file too large or
// unreadable turned into a sentence, so every reader's error names the path and the reason. Every
// file the project writes (models, optimizer states, policies, schedules, kernel cache entries,
// dumps) goes through one durable writer here; what each file holds is its owner's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace edb::ir {

// Why the file at `path` cannot be read whole, or "" when it is a readable regular file of at most
// `max_bytes`: "does not exist", "is a directory", "is not a regular file (a device, pipe or
// socket)", "is N bytes, more than the M this reader accepts", "cannot be opened: REASON".
std::string unreadable_file_reason(const std::string& path, uint64_t max_bytes);

// Why a file written whole at `path` (a temporary file, then renamed over it) must not replace what
// is there, or "" when nothing is there or a regular file is: "is a directory; give a file name in
// it", "is not a regular file (a device, pipe or socket); give the name of a file to write" (a
// rename would put a file in place of /dev/null).
std::string unreplaceable_file_reason(const std::string& path);

// Why nothing can be written at `path` now, or "": unreplaceable_file_reason, else a temporary file
// created beside it (and removed at once) fails: "cannot write 'PATH': REASON". For a front end
// that checks its output paths before any work.
std::string unwritable_file_reason(const std::string& path);

// The most a model, optimizer or policy file may hold: 16 GiB.
constexpr uint64_t kMaxModelFileBytes = uint64_t{16} << 30;

// ---- the durable writer ----
// A file is written whole or not at all: its bytes go to a temporary file unique to this writer
// beside it (DIR/.NAME.tmp-PID-N), flushed to the disk, renamed over PATH, and the directory
// flushed, so a reader finds the old file or the new one, whole, even after a crash. A failure (a
// full disk, a read-only directory) leaves neither a partial PATH nor a temporary behind. Writers
// of one path in several threads or processes take turns through a FileLock, so two saves at once
// both succeed and the last one renamed is what stays.

// Holds an exclusive flock on the lock file `lock_path` while it lives; waits for it. The file is
// created when missing and removed by the holder that releases it (a holder killed leaves an empty
// file, which the next holder takes and removes). error() says why the lock could not be taken;
// then nothing is held.
class FileLock {
 public:
  explicit FileLock(std::string lock_path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  const std::string& error() const { return error_; }

 private:
  std::string path_, error_;
  int fd_ = -1;
};

// The lock file writers of `path` share: PATH.lock.
std::string lock_path_for(const std::string& path);

// A temporary file beside `path`, created new and empty; removed when this object goes unless
// commit() renamed it over `path`. error() says why it could not be created.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::string path);
  ~TemporaryFile();
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  const std::string& name() const { return temporary_; }  // for a program that writes it (dot)
  const std::string& error() const { return error_; }
  // Writes `contents` and (with `sync`) flushes them to the disk: "" or why not ("cannot write
  // 'PATH': REASON"; the temporary is removed then).
  std::string write(std::string_view contents, bool sync = true);
  // Flushes what another program wrote under name() to the disk: "" or why not.
  std::string sync();
  // Renames the temporary over `path` and, when its bytes were flushed, flushes the directory: ""
  // or why not (the temporary is removed then too).
  std::string commit();

 private:
  std::string failed(int error);  // removes the temporary; the error, kept
  std::string path_, temporary_, error_;
  bool committed_ = false, synced_ = true;
};

struct WriteOptions {
  bool lock = true;  // take PATH.lock around the write: off where every writer of a path writes the same bytes
  bool sync = true;  // flush to the disk: off for counters that may be lost (the kernel cache's hit counts)
};

// The durable writer: `contents` written whole at `path` as above. "" on success, else why not,
// naming the file: "cannot write 'PATH': No space left on device". Never throws for a disk problem.
std::string write_file(const std::string& path, std::string_view contents, WriteOptions options = {});

// Whether a file name (no directory) is one of TemporaryFile's: a directory's upkeep (the kernel
// cache's pruning) removes old ones, which a writer killed mid-write left behind.
bool is_temporary_name(std::string_view name);

// The memory this process may use, in bytes: the machine's physical memory (not what is free now),
// or less where a limit on the process says so (ulimit -v or -d); 0 when unknown. What a request
// would need is compared against it before allocating.
uint64_t memory_bytes();

}  // namespace edb::ir
