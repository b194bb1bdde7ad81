// edb-run --dump-schedule: a schedule's dot picture (scheduler::to_dot) written as FILE.dot or
// FILE.gv, or rendered to FILE.svg, .png or .pdf by graphviz's `dot` program run as a subprocess.
#pragma once

#include <string>

namespace edb::tools {

// Checks FILE before any work is done: a known extension, a place that can be written, and for a
// rendered format graphviz's `dot` on the PATH. UsageError starting with `flag` otherwise.
void check_picture_path(const std::string& flag, const std::string& path);

// Writes `dot_text` to `path`, rendered when the extension asks for it. UsageError on failure.
void write_picture(const std::string& flag, const std::string& dot_text, const std::string& path);

}  // namespace edb::tools
