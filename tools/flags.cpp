// The command-line parser behind the tools.
#include "tools/flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <exception>

#include <edbatch/errors.h>

namespace edb::tools {

int run_tool(const char* program, int (*body)(int, char**), int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

Flags::Flags(const std::string& program, std::vector<std::string> with_value, std::vector<std::string> switches)
    : program_(program), with_value_(std::move(with_value)), switches_(std::move(switches)) {}

std::vector<std::string> Flags::parse(int argc, char** argv, int first) {
  std::vector<std::string> positional;
  auto known = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (known(switches_, name)) {
      if (inline_value) throw UsageError(program_ + ": --" + name + " takes no value");
      values_[name] = "1";
    } else if (known(with_value_, name)) {
      if (!inline_value) {
        if (i + 1 >= argc) throw UsageError(program_ + ": --" + name + " needs a value");
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      throw UsageError(program_ + ": unknown flag --" + name + " (see --help)");
    }
  }
  return positional;
}

std::string Flags::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Flags::get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& s = it->second;
  int64_t value = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (error != std::errc() || end != s.data() + s.size())
    throw UsageError(program_ + ": --" + name + " expects an integer, got '" + s + "'");
  if (value < min || value > max)
    throw UsageError(program_ + ": --" + name + " must be in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got " + s);
  return value;
}

double Flags::get_double(const std::string& name, double fallback, double min, double max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& s = it->second;
  double value = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (error != std::errc() || end != s.data() + s.size() || !std::isfinite(value))
    throw UsageError(program_ + ": --" + name + " expects a number, got '" + s + "'");
  if (value < min || value > max) {
    char range[96];
    std::snprintf(range, sizeof range, "[%g, %g]", min, max);
    throw UsageError(program_ + ": --" + name + " must be in " + range + ", got " + s);
  }
  return value;
}

}  // namespace edb::tools
