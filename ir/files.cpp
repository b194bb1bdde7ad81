// The file checks and the durable writer of ir/files.h.
#include "ir/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>

namespace edb::ir {
namespace {

std::string cannot_write(const std::string& path, int error) {
  return "cannot write '" + path + "': " + std::strerror(error);
}

std::string directory_of(const std::string& path) {
  std::string directory = std::filesystem::path(path).parent_path().string();
  return directory.empty() ? "." : directory;
}

// DIR/.NAME.tmp-PID-N: unique to this process (PID) and to this writer in it (N).
std::string temporary_name(const std::string& path) {
  static std::atomic<uint64_t> sequence{0};
  const std::filesystem::path p(path);
  std::string name = "." + p.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                     std::to_string(sequence.fetch_add(1, std::memory_order_relaxed));
  return p.has_parent_path() ? (p.parent_path() / name).string() : name;
}

bool write_all(int fd, std::string_view bytes, int& error) {
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : ENOSPC;
      return false;
    }
    done += size_t(n);
  }
  return true;
}

}  // namespace

std::string unreadable_file_reason(const std::string& path, uint64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status)) {
    return error && error != std::errc::no_such_file_or_directory ? "cannot be examined: " + error.message()
                                                                   : "does not exist";
  }
  if (fs::is_directory(status)) return "is a directory";
  if (!fs::is_regular_file(status)) return "is not a regular file (a device, pipe or socket)";
  const uintmax_t bytes = fs::file_size(path, error);
  if (error) return "cannot be examined: " + error.message();
  if (bytes > max_bytes)
    return "is " + std::to_string(bytes) + " bytes, more than the " + std::to_string(max_bytes) + " this reader accepts";
  std::ifstream probe(path, std::ios::binary);
  if (!probe) return std::string("cannot be opened: ") + std::strerror(errno);
  return "";
}

std::string unreplaceable_file_reason(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);  // through links, as the user means them
  if (error || !fs::exists(status) || fs::is_regular_file(status)) return "";
  if (fs::is_directory(status)) return "is a directory; give a file name in it";
  return "is not a regular file (a device, pipe or socket); give the name of a file to write";
}

std::string unwritable_file_reason(const std::string& path) {
  if (const std::string why = unreplaceable_file_reason(path); !why.empty()) return "'" + path + "' " + why;
  TemporaryFile probe(path);
  return probe.error();
}

// ---- FileLock ----

std::string lock_path_for(const std::string& path) { return path + ".lock"; }

FileLock::FileLock(std::string lock_path) : path_(std::move(lock_path)) {
  // A holder removes the file before it lets go, so a waiter may wake holding a lock on a file no
  // longer there: it tries again on the file now at the path.
  for (;;) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      error_ = "cannot create the lock file '" + path_ + "': " + std::strerror(errno);
      return;
    }
    int locked;
    while ((locked = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
    }
    if (locked != 0) {
      error_ = "cannot lock '" + path_ + "': " + std::strerror(errno);
      ::close(fd_);
      fd_ = -1;
      return;
    }
    struct stat held {}, named {};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino)
      return;
    ::close(fd_);
  }
}

FileLock::~FileLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // before the lock goes: a waiter then finds it gone and starts again
  ::close(fd_);
}

// ---- TemporaryFile ----

TemporaryFile::TemporaryFile(std::string path) : path_(std::move(path)), temporary_(temporary_name(path_)) {
  const int fd = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    error_ = cannot_write(path_, errno);
    temporary_.clear();
    return;
  }
  ::close(fd);
}

TemporaryFile::~TemporaryFile() {
  if (!committed_ && !temporary_.empty()) ::unlink(temporary_.c_str());
}

std::string TemporaryFile::failed(int error) {
  ::unlink(temporary_.c_str());
  temporary_.clear();
  return error_ = cannot_write(path_, error);
}

std::string TemporaryFile::write(std::string_view contents, bool sync) {
  if (!error_.empty()) return error_;
  synced_ = sync;
  const int fd = ::open(temporary_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  int error = fd < 0 ? errno : 0;
  if (fd >= 0) {
    if (write_all(fd, contents, error) && sync && ::fsync(fd) != 0) error = errno;
    if (::close(fd) != 0 && !error) error = errno;
  }
  return error ? failed(error) : "";
}

std::string TemporaryFile::sync() {
  if (!error_.empty()) return error_;
  const int fd = ::open(temporary_.c_str(), O_RDONLY | O_CLOEXEC);
  int error = fd < 0 ? errno : 0;
  if (fd >= 0) {
    if (::fsync(fd) != 0) error = errno;
    ::close(fd);
  }
  return error ? failed(error) : "";
}

std::string TemporaryFile::commit() {
  if (!error_.empty()) return error_;
  if (committed_) return "";
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) return failed(errno);
  committed_ = true;
  if (!synced_) return "";
  // The rename itself reaches the disk with the directory's entry.
  if (const int fd = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  return "";
}

std::string write_file(const std::string& path, std::string_view contents, WriteOptions options) {
  if (const std::string why = unreplaceable_file_reason(path); !why.empty()) return "'" + path + "' " + why;
  std::optional<FileLock> lock;
  if (options.lock) {
    lock.emplace(lock_path_for(path));
    if (!lock->error().empty()) return "cannot write '" + path + "': " + lock->error();
  }
  TemporaryFile file(path);
  if (std::string why = file.write(contents, options.sync); !why.empty()) return why;
  return file.commit();
}

bool is_temporary_name(std::string_view name) {
  return name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string_view::npos;
}

uint64_t memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  uint64_t bytes = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  for (const int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit limit{};
    if (::getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && (bytes == 0 || limit.rlim_cur < bytes))
      bytes = uint64_t(limit.rlim_cur);
  }
  return bytes;
}

}  // namespace edb::ir
