// A small strict command-line parser: --name VALUE or --name=VALUE, typed values, and errors that
// name the flag and the bad value. Unknown flags are errors, never ignored.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace edb::tools {

// Runs a tool's body: a UsageError is one line on stderr and exit status 2, any other exception
// "PROGRAM: what" and status 1, so every tool fails the same clear way.
int run_tool(const char* program, int (*body)(int, char**), int argc, char** argv);

class Flags {
 public:
  // `with_value`: flags that take a value; `switches`: flags that do not.
  Flags(const std::string& program, std::vector<std::string> with_value, std::vector<std::string> switches);
  // Parses argv[first..]; positional arguments are returned in order. Throws edb::UsageError.
  std::vector<std::string> parse(int argc, char** argv, int first);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  // A finite decimal number in [min, max].
  double get_double(const std::string& name, double fallback, double min, double max) const;

 private:
  std::string program_;
  std::vector<std::string> with_value_, switches_;
  std::map<std::string, std::string> values_;
};

}  // namespace edb::tools
