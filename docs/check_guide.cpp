// Keeps docs/guide.md honest: every ```cpp block in it must follow a `<!-- snippet: NAME -->` line
// and be exactly docs/snippets/NAME.cpp, which the build compiles and ctest runs; every snippet
// file must be quoted. `--write` copies the files into the guide's blocks instead of checking.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

bool read(const std::string& path, std::string& text) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  std::ostringstream out;
  out << file.rdbuf();
  text = out.str();
  return true;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The first line where two texts differ, 1-based, for the message.
size_t first_difference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i + 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool write = argc == 4 && std::string(argv[1]) == "--write";
  if (argc != 3 && !write) {
    std::fprintf(stderr, "usage: edb-check-guide [--write] GUIDE.md SNIPPET_DIR\n");
    return 2;
  }
  const std::string guide_path = argv[argc - 2], snippet_dir = argv[argc - 1];
  std::string guide;
  if (!read(guide_path, guide)) {
    std::fprintf(stderr, "edb-check-guide: cannot read '%s'\n", guide_path.c_str());
    return 2;
  }
  const std::string marker = "<!-- snippet: ", marker_end = " -->";
  const std::vector<std::string> lines = split_lines(guide);
  std::vector<std::string> output;  // the guide with its blocks replaced (--write)
  std::set<std::string> quoted;
  int problems = 0;
  auto problem = [&](size_t line, const std::string& what) {
    std::fprintf(stderr, "%s:%zu: %s\n", guide_path.c_str(), line, what.c_str());
    ++problems;
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    output.push_back(lines[i]);
    if (lines[i].rfind("```", 0) != 0 || lines[i] == "```") continue;
    const bool cpp = lines[i] == "```cpp" || lines[i] == "```c++";
    size_t end = i + 1;
    while (end < lines.size() && lines[end] != "```") ++end;
    if (end == lines.size()) {
      problem(i + 1, "code block never closed");
      break;
    }
    std::vector<std::string> block(lines.begin() + long(i) + 1, lines.begin() + long(end));
    const std::string before = i > 0 ? lines[i - 1] : "";
    const bool marked = before.rfind(marker, 0) == 0 && before.size() > marker.size() + marker_end.size() &&
                        before.compare(before.size() - marker_end.size(), marker_end.size(), marker_end) == 0;
    if (!cpp) {
      if (marked) problem(i + 1, "a snippet marker before a block that is not ```cpp");
      for (size_t k = i + 1; k <= end; ++k) output.push_back(lines[k]);
      i = end;
      continue;
    }
    if (!marked) {
      problem(i + 1, "a ```cpp block without a `<!-- snippet: NAME -->` line before it: put the code in " +
                         snippet_dir + "/NAME.cpp so the build compiles it");
      for (size_t k = i + 1; k <= end; ++k) output.push_back(lines[k]);
      i = end;
      continue;
    }
    const std::string name = before.substr(marker.size(), before.size() - marker.size() - marker_end.size());
    const std::string file = snippet_dir + "/" + name + ".cpp";
    std::string text;
    if (!read(file, text)) {
      problem(i, "snippet '" + name + "': cannot read " + file);
      for (size_t k = i + 1; k <= end; ++k) output.push_back(lines[k]);
      i = end;
      continue;
    }
    quoted.insert(name);
    const std::vector<std::string> expected = split_lines(text);
    if (write) {
      output.insert(output.end(), expected.begin(), expected.end());
    } else if (block != expected) {
      const size_t at = first_difference(block, expected);
      problem(i + 1 + at, "snippet '" + name + "' differs from " + file + " at its line " + std::to_string(at) +
                              " (edb-check-guide --write copies the file in)");
    }
    output.push_back("```");
    i = end;
  }
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(snippet_dir, error)) {
    if (entry.path().extension() != ".cpp") continue;
    const std::string name = entry.path().stem().string();
    if (!quoted.count(name)) {
      std::fprintf(stderr, "%s: snippet '%s' (%s) is not quoted in the guide\n", guide_path.c_str(), name.c_str(),
                   entry.path().c_str());
      ++problems;
    }
  }
  if (error) {
    std::fprintf(stderr, "edb-check-guide: cannot list '%s': %s\n", snippet_dir.c_str(), error.message().c_str());
    return 2;
  }
  if (write && problems == 0) {
    std::ofstream out(guide_path, std::ios::binary | std::ios::trunc);
    for (const std::string& line : output) out << line << '\n';
    if (!out) {
      std::fprintf(stderr, "edb-check-guide: cannot write '%s'\n", guide_path.c_str());
      return 2;
    }
  }
  if (problems) return 1;
  std::printf("%s: %zu snippets, each exactly as in %s\n", guide_path.c_str(), quoted.size(), snippet_dir.c_str());
  return 0;
}
