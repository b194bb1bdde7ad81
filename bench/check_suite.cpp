// edb-bench-check: checks an edb-bench report directory against the matrix it was asked for:
// results.json has a row per configuration with consistent figures, and every SVG plot is
// well-formed XML (a small strict parser here, no dependency) with exactly the expected series.
// Used by ctest (bench/test_suite.cmake); exit status 1 and one line per problem when not.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include <edbatch/edbatch.h>

#include "tools/flags.h"

namespace {

// --- A strict XML reader: elements, attributes, text, comments, the declaration; no DTD. ---

struct Element {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::vector<std::unique_ptr<Element>> children;
  std::string text;
};

class XmlReader {
 public:
  explicit XmlReader(std::string text) : s_(std::move(text)) {}

  std::unique_ptr<Element> document() {
    skip_space();
    if (s_.compare(i_, 5, "<?xml") == 0) {
      const size_t end = s_.find("?>", i_);
      if (end == std::string::npos) fail("unterminated XML declaration");
      i_ = end + 2;
    }
    skip_misc();
    if (i_ >= s_.size() || s_[i_] != '<') fail("no root element");
    auto root = element();
    skip_misc();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("XML: " + what + " at offset " + std::to_string(i_));
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void skip_misc() {  // whitespace and comments between elements
    for (;;) {
      skip_space();
      if (s_.compare(i_, 4, "<!--") != 0) return;
      const size_t end = s_.find("-->", i_ + 4);
      if (end == std::string::npos) fail("unterminated comment");
      i_ = end + 3;
    }
  }
  std::string name() {
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || std::string_view("-_:.").find(s_[i_]) != std::string_view::npos))
      ++i_;
    if (i_ == start || std::isdigit(static_cast<unsigned char>(s_[start]))) fail("expected a name");
    return s_.substr(start, i_ - start);
  }
  // Text up to `stop`, with entities decoded; a bare '<' or '&' is an error.
  std::string characters(char stop) {
    std::string out;
    while (i_ < s_.size() && s_[i_] != stop) {
      const char c = s_[i_];
      if (c == '<') fail("'<' in text or attribute");
      if (c != '&') {
        out += c, ++i_;
        continue;
      }
      const size_t end = s_.find(';', i_);
      if (end == std::string::npos || end - i_ > 10) fail("bad entity");
      const std::string entity = s_.substr(i_ + 1, end - i_ - 1);
      static const std::map<std::string, char> named = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
      if (named.count(entity)) out += named.at(entity);
      else if (entity.size() > 1 && entity[0] == '#') out += '?';  // a character reference; its value does not matter here
      else fail("unknown entity &" + entity + ";");
      i_ = end + 1;
    }
    return out;
  }
  std::unique_ptr<Element> element() {
    ++i_;  // '<'
    auto e = std::make_unique<Element>();
    e->name = name();
    for (;;) {
      skip_space();
      if (i_ >= s_.size()) fail("unterminated start tag <" + e->name);
      if (s_.compare(i_, 2, "/>") == 0) {
        i_ += 2;
        return e;
      }
      if (s_[i_] == '>') {
        ++i_;
        break;
      }
      const std::string attribute = name();
      skip_space();
      if (i_ >= s_.size() || s_[i_] != '=') fail("expected '=' after " + attribute);
      ++i_;
      skip_space();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) fail("unquoted value of " + attribute);
      const char quote = s_[i_++];
      std::string value = characters(quote);
      if (i_ >= s_.size()) fail("unterminated value of " + attribute);
      ++i_;
      if (!e->attributes.emplace(attribute, value).second) fail("duplicate attribute " + attribute);
    }
    for (;;) {  // content
      e->text += characters('<');
      if (i_ >= s_.size()) fail("<" + e->name + "> is never closed");
      if (s_.compare(i_, 4, "<!--") == 0) {
        skip_misc();
      } else if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        const std::string closing = name();
        if (closing != e->name) fail("</" + closing + "> closes <" + e->name + ">");
        skip_space();
        if (i_ >= s_.size() || s_[i_] != '>') fail("bad end tag");
        ++i_;
        return e;
      } else {
        e->children.push_back(element());
      }
    }
  }

  std::string s_;
  size_t i_ = 0;
};

// --- The checks ---

std::vector<std::string> problems;

void expect(bool ok, const std::string& what) {
  if (!ok) problems.push_back(what);
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

void collect(const Element& e, const std::string& name, std::vector<const Element*>& found) {
  if (e.name == name) found.push_back(&e);
  for (const auto& child : e.children) collect(*child, name, found);
}

// The series of a chart, by name, each with its count of marks (points or bars).
std::map<std::string, int> series_of(const Element& root) {
  std::vector<const Element*> groups;
  collect(root, "g", groups);
  std::map<std::string, int> series;
  for (const Element* g : groups) {
    const auto cls = g->attributes.find("class");
    if (cls == g->attributes.end() || cls->second != "series") continue;
    std::vector<const Element*> marks;
    collect(*g, "circle", marks);
    collect(*g, "rect", marks);
    const std::string name = g->attributes.count("data-series") ? g->attributes.at("data-series") : "";
    expect(!series.count(name), "series '" + name + "' appears twice");
    series[name] = int(marks.size());
  }
  return series;
}

// Reads and parses `path`; checks the root is <svg> and its series are `expected`, each with
// `marks` marks (-1: any number).
void check_svg(const std::string& path, const std::map<std::string, int>& expected) {
  std::ifstream in(path);
  if (!in) {
    expect(false, path + ": missing");
    return;
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    const auto root = XmlReader(text.str()).document();
    expect(root->name == "svg", path + ": root element is <" + root->name + ">, not <svg>");
    const std::map<std::string, int> found = series_of(*root);
    for (const auto& [name, marks] : expected) {
      const auto it = found.find(name);
      if (it == found.end()) expect(false, path + ": no series '" + name + "'");
      else expect(marks < 0 || it->second == marks, path + ": series '" + name + "' has " + std::to_string(it->second) +
                                                        " marks, expected " + std::to_string(marks));
    }
    for (const auto& [name, marks] : found) expect(expected.count(name) > 0, path + ": unexpected series '" + name + "'");
  } catch (const std::exception& e) {
    expect(false, path + ": " + e.what());
  }
}

bool near(double a, double b) { return std::fabs(a - b) <= 1e-6 * std::max({1.0, std::fabs(a), std::fabs(b)}); }

void check_row(const nlohmann::json& r, const nlohmann::json& report, int runs, int64_t instances) {
  const std::string where = r.value("model", "?") + " " + r.value("policy", "?") + "/" + r.value("executor", "?") +
                            " batch " + std::to_string(r.value("batch", 0)) + ": ";
  for (const char* field : {"instances", "runs", "instances_per_sec", "vs_sequential", "nodes", "batches", "lower_bound",
                            "batches_per_lower_bound", "kernel_calls", "bytes_gathered", "bytes_gathered_per_instance",
                            "flops", "gflops_per_sec", "gemm_fraction", "loss", "time_ms"})
    if (!r.contains(field)) {
      expect(false, where + "no field " + field);
      return;
    }
  expect(r["runs"] == runs, where + "runs " + r["runs"].dump());
  expect(r["instances"] == instances, where + "instances " + r["instances"].dump());
  const double rate = r["instances_per_sec"], batches = r["batches"], bound = r["lower_bound"];
  expect(rate > 0, where + "no throughput");
  expect(bound > 0 && batches >= bound, where + "batches below the lower bound");
  expect(near(r["batches_per_lower_bound"], batches / bound), where + "batches_per_lower_bound");
  const double passes = double(instances) * runs;
  expect(r["flops"].get<double>() > 0, where + "no flops");
  expect(near(r["gflops_per_sec"], rate * r["flops"].get<double>() / passes / 1e9), where + "gflops_per_sec");
  expect(near(r["gemm_fraction"], r["gflops_per_sec"].get<double>() / report["gemm"]["gflops_per_sec"].get<double>()),
         where + "gemm_fraction");
  expect(near(r["bytes_gathered_per_instance"], r["bytes_gathered"].get<double>() / passes), where + "bytes per instance");
  const nlohmann::json& t = r["time_ms"];
  double parts = 0;
  for (const char* stage : {"trace", "schedule", "plan", "compile", "execute", "other"}) {
    expect(t.contains(stage) && t[stage].get<double>() >= 0, where + "time_ms." + stage);
    parts += t.value(stage, 0.0);
  }
  expect(t.value("total", 0.0) > 0 && parts >= t.value("total", 0.0) * (1 - 1e-6), where + "time split misses the total");
  if (r["policy"] == "sequential") expect(r["vs_sequential"] == 1.0, where + "sequential is not 1x itself");
}

int run(int argc, char** argv) {
  edb::tools::Flags flags("edb-bench-check", {"models", "policies", "executors", "batches", "runs", "instances"}, {});
  const std::vector<std::string> positional = flags.parse(argc, argv, 1);
  if (positional.size() != 1)
    throw edb::UsageError("usage: edb-bench-check DIR --models L --policies L --executors L --batches L --runs N --instances N");
  const std::string dir = positional[0];
  const std::vector<std::string> models = split(flags.get("models", "")), policies = split(flags.get("policies", "")),
                                 executors = split(flags.get("executors", "")), batch_items = split(flags.get("batches", ""));
  const int runs = int(flags.get_int("runs", 1, 1, 1000));
  const int64_t instances = flags.get_int("instances", 1, 1, int64_t{1} << 40);
  std::vector<int> batches;
  for (const std::string& b : batch_items) batches.push_back(std::stoi(b));

  std::ifstream in(dir + "/results.json");
  if (!in) throw edb::UsageError("edb-bench-check: no " + dir + "/results.json");
  const nlohmann::json report = nlohmann::json::parse(in);
  for (const char* field : {"command", "date", "cpu", "gemm", "devices", "models", "results", "skipped", "plots", "losses_agree"})
    expect(report.contains(field), std::string("results.json: no field ") + field);
  if (!problems.empty()) {
    for (const std::string& p : problems) std::fprintf(stderr, "edb-bench-check: %s\n", p.c_str());
    return 1;
  }
  expect(report["gemm"].value("gflops_per_sec", 0.0) > 0, "no GEMM rate");
  bool cpu = false;
  for (const auto& d : report["devices"]) {
    if (d["name"] == "cpu") cpu = d["available"] == true;
    if (d["available"] == false) expect(!d.value("reason", "").empty(), "a device skipped without a reason");
  }
  expect(cpu, "the cpu device did not run");
  expect(report["losses_agree"] == true, "losses differ between configurations");

  // Every configuration exactly once (the reference executor runs only the sequential policy).
  std::vector<std::string> configs;
  for (const std::string& e : executors)
    for (const std::string& p : policies)
      if (e != "reference" || p == "sequential") configs.push_back(p + "/" + e);
  std::map<std::string, int> seen;
  std::map<std::string, double> first_loss;
  for (const auto& r : report["results"]) {
    const std::string key = r.value("model", "") + " " + r.value("policy", "") + "/" + r.value("executor", "") + " " +
                            std::to_string(r.value("batch", 0));
    ++seen[key];
    check_row(r, report, runs, instances);
  }
  for (const std::string& m : models)
    for (int b : batches) {
      double sequential_ratio = -1, worst_other = 0;
      for (const std::string& c : configs) {
        const std::string key = m + " " + c + " " + std::to_string(b);
        expect(seen[key] == 1, "results.json: " + key + " appears " + std::to_string(seen[key]) + " times");
      }
      for (const auto& r : report["results"])
        if (r["model"] == m && r["batch"] == b) {
          if (r["policy"] == "sequential") sequential_ratio = r["batches_per_lower_bound"];
          else worst_other = std::max(worst_other, r["batches_per_lower_bound"].get<double>());
        }
      // One node per batch is the most batches any schedule can have.
      if (sequential_ratio > 0) expect(sequential_ratio >= worst_other, m + " batch " + std::to_string(b) + ": a policy needs more batches than sequential");
    }
  expect(report["results"].size() == models.size() * batches.size() * configs.size(),
         "results.json: " + std::to_string(report["results"].size()) + " rows, expected " +
             std::to_string(models.size() * batches.size() * configs.size()));

  // The plots: a line per configuration with a point per batch size; the split's six stages with
  // a bar per configuration; batches/LB with a bar per model for each batching policy.
  std::set<std::string> plots;
  for (const auto& p : report["plots"]) plots.insert(p.get<std::string>());
  for (const std::string& m : models) {
    std::map<std::string, int> lines, stages;
    for (const std::string& c : configs) lines[c] = int(batches.size());
    for (const char* stage : {"trace", "schedule", "plan", "compile", "execute", "other"}) stages[stage] = -1;
    expect(plots.count("throughput-" + m + ".svg") && plots.count("time-split-" + m + ".svg"), "plots: " + m + " missing");
    check_svg(dir + "/throughput-" + m + ".svg", lines);
    check_svg(dir + "/time-split-" + m + ".svg", stages);
  }
  std::map<std::string, int> ratio_series;
  for (const std::string& p : policies)
    if (p != "sequential") ratio_series[p] = int(models.size());
  if (ratio_series.empty()) ratio_series["sequential"] = int(models.size());
  check_svg(dir + "/batches-per-lb.svg", ratio_series);

  for (const std::string& p : problems) std::fprintf(stderr, "edb-bench-check: %s\n", p.c_str());
  if (problems.empty())
    std::printf("edb-bench-check: %s: %zu rows and %zu plots as expected\n", dir.c_str(), report["results"].size(), plots.size());
  return problems.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return edb::tools::run_tool("edb-bench-check", run, argc, argv); }
