// Writing and rendering schedule pictures; graphviz is optional and only run, never linked.
#include "tools/schedule_picture.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include <edbatch/errors.h>

#include "ir/files.h"

extern char** environ;

namespace edb::tools {

namespace {

constexpr const char* kInstallGraphviz =
    "graphviz's `dot` program is not installed (on Debian: apt-get install graphviz), or write FILE.dot instead";

// "" for dot text, else dot's -T format.
std::string render_format(const std::string& flag, const std::string& path) {
  const size_t dot = path.rfind('.');
  const std::string extension = dot == std::string::npos ? "" : path.substr(dot + 1);
  if (extension == "dot" || extension == "gv") return "";
  if (extension == "svg" || extension == "png" || extension == "pdf") return extension;
  throw UsageError(flag + ": '" + path + "' must end in .dot or .gv (graphviz text), or .svg, .png or .pdf (rendered)");
}

bool dot_on_path() {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "";
  while (true) {
    const size_t colon = rest.find(':');
    std::string directory(rest.substr(0, colon));
    if (directory.empty()) directory = ".";
    if (access((directory + "/dot").c_str(), X_OK) == 0) return true;
    if (colon == std::string_view::npos) return false;
    rest.remove_prefix(colon + 1);
  }
}

void throw_if_failed(const std::string& flag, const std::string& why) {
  if (!why.empty()) throw UsageError(flag + ": " + why);
}

// Runs `dot -TFORMAT -o OUTPUT INPUT`; UsageError when it cannot start or fails.
void run_dot(const std::string& flag, const std::string& format, const std::string& input, const std::string& output) {
  const std::string type = "-T" + format;
  std::vector<char*> argv = {const_cast<char*>("dot"), const_cast<char*>(type.c_str()), const_cast<char*>("-o"),
                             const_cast<char*>(output.c_str()), const_cast<char*>(input.c_str()), nullptr};
  pid_t pid = 0;
  const int error = posix_spawnp(&pid, "dot", nullptr, nullptr, argv.data(), environ);
  if (error == ENOENT) throw UsageError(flag + ": " + kInstallGraphviz);
  if (error != 0) throw UsageError(flag + ": cannot run graphviz's dot: " + std::strerror(error));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw UsageError(flag + ": waiting for graphviz's dot: " + std::strerror(errno));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) throw UsageError(flag + ": " + kInstallGraphviz);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw UsageError(flag + ": graphviz's dot failed to render '" + output + "' (" +
                     (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                        : std::string("killed by a signal")) +
                     ")");
}

}  // namespace

void check_picture_path(const std::string& flag, const std::string& path) {
  const std::string format = render_format(flag, path);
  if (!format.empty() && !dot_on_path()) throw UsageError(flag + ": " + kInstallGraphviz);
  // A probe beside the file, so an existing picture is not clobbered before the new one is ready.
  throw_if_failed(flag, ir::unwritable_file_reason(path));
}

void write_picture(const std::string& flag, const std::string& dot_text, const std::string& path) {
  const std::string format = render_format(flag, path);
  if (format.empty()) return throw_if_failed(flag, ir::write_file(path, dot_text));
  // dot reads a temporary and writes another, renamed over `path` once it is whole: a failing or
  // interrupted dot (a full disk) leaves nothing behind.
  ir::TemporaryFile input(path), output(path);
  throw_if_failed(flag, input.write(dot_text, false));
  throw_if_failed(flag, output.error());
  run_dot(flag, format, input.name(), output.name());
  throw_if_failed(flag, output.sync());
  throw_if_failed(flag, output.commit());
}

}  // namespace edb::tools
