// Keeps the docs honest: in every page given (README.md, docs/*.md), every ```cpp block must follow
// a `<!-- snippet: NAME -->` line and be exactly docs/snippets/NAME.cpp, which the build compiles
// and ctest runs; every snippet file must be quoted by some page; and every relative link must name
// a file that exists (and, for a markdown file, a heading that exists). `--write` copies the
// snippet files into the pages' blocks instead of checking them.
#include <cctype>
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

// GitHub's anchor for a heading: lower case, spaces to hyphens, other punctuation dropped.
std::string slug(const std::string& heading) {
  std::string out;
  for (unsigned char c : heading) {
    if (std::isalnum(c) || c == '-' || c == '_') out += char(std::tolower(c));
    else if (c == ' ') out += '-';
  }
  return out;
}

std::set<std::string> anchors(const std::vector<std::string>& lines) {
  std::set<std::string> out;
  bool in_block = false;
  for (const std::string& line : lines) {
    if (line.rfind("```", 0) == 0) in_block = !in_block;
    if (in_block || line.empty() || line[0] != '#') continue;
    const size_t text = line.find_first_not_of('#');
    if (text != std::string::npos && line[text] == ' ') out.insert(slug(line.substr(text + 1)));
  }
  return out;
}

// The relative links of a page's lines outside code blocks: (line number, target).
std::vector<std::pair<size_t, std::string>> links(const std::vector<std::string>& lines) {
  std::vector<std::pair<size_t, std::string>> out;
  bool in_block = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("```", 0) == 0) in_block = !in_block;
    if (in_block) continue;
    for (size_t at = lines[i].find("]("); at != std::string::npos; at = lines[i].find("](", at + 2)) {
      const size_t end = lines[i].find(')', at + 2);
      if (end == std::string::npos) break;
      const std::string target = lines[i].substr(at + 2, end - at - 2);
      if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0 || target.rfind("mailto:", 0) == 0)
        continue;
      out.emplace_back(i + 1, target);
    }
  }
  return out;
}

// Checks one page (or, with `write`, rewrites its snippet blocks); returns its problem count.
int check_page(const std::string& path, const std::string& snippet_dir, bool write, std::set<std::string>& quoted) {
  std::string page;
  if (!read(path, page)) {
    std::fprintf(stderr, "edb-check-guide: cannot read '%s'\n", path.c_str());
    return 1;
  }
  const std::string marker = "<!-- snippet: ", marker_end = " -->";
  const std::vector<std::string> lines = split_lines(page);
  std::vector<std::string> output;  // the page with its blocks replaced (--write)
  int problems = 0;
  auto problem = [&](size_t line, const std::string& what) {
    std::fprintf(stderr, "%s:%zu: %s\n", path.c_str(), line, what.c_str());
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
  // Relative links: the file must exist, and a #heading in a markdown file too.
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  for (const auto& [line, target] : links(lines)) {
    const size_t hash = target.find('#');
    const std::string file = target.substr(0, hash), anchor = hash == std::string::npos ? "" : target.substr(hash + 1);
    const std::filesystem::path resolved = file.empty() ? std::filesystem::path(path) : dir / file;
    if (!std::filesystem::exists(resolved)) {
      problem(line, "link to '" + target + "': " + resolved.string() + " does not exist");
      continue;
    }
    if (anchor.empty() || resolved.extension() != ".md") continue;
    std::string linked;
    if (!read(resolved.string(), linked) || !anchors(split_lines(linked)).count(anchor))
      problem(line, "link to '" + target + "': no heading '#" + anchor + "' in " + resolved.string());
  }
  if (write && problems == 0) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (const std::string& line : output) out << line << '\n';
    if (!out) {
      std::fprintf(stderr, "edb-check-guide: cannot write '%s'\n", path.c_str());
      return problems + 1;
    }
  }
  return problems;
}

}  // namespace

int main(int argc, char** argv) {
  const bool write = argc >= 2 && std::string(argv[1]) == "--write";
  const int first = write ? 2 : 1;
  if (argc - first < 2) {
    std::fprintf(stderr, "usage: edb-check-guide [--write] PAGE.md... SNIPPET_DIR\n");
    return 2;
  }
  const std::string snippet_dir = argv[argc - 1];
  std::set<std::string> quoted;
  int problems = 0;
  for (int i = first; i < argc - 1; ++i) problems += check_page(argv[i], snippet_dir, write, quoted);
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(snippet_dir, error)) {
    if (entry.path().extension() != ".cpp") continue;
    const std::string name = entry.path().stem().string();
    if (!quoted.count(name)) {
      std::fprintf(stderr, "%s: snippet '%s' is not quoted in any page\n", entry.path().c_str(), name.c_str());
      ++problems;
    }
  }
  if (error) {
    std::fprintf(stderr, "edb-check-guide: cannot list '%s': %s\n", snippet_dir.c_str(), error.message().c_str());
    return 2;
  }
  if (problems) return 1;
  std::printf("%d pages: %zu snippets, each exactly as in %s; every relative link resolves\n", argc - 1 - first,
              quoted.size(), snippet_dir.c_str());
  return 0;
}
