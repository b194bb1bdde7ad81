// edb-bench-policy-wall: a policy's wall clock against greedy's on one sample model, in one process:
// per batch size three engines (greedy, the policy from its file, and greedy again as the control)
// run one pass each per round, their order rotating, so a burst of another process's load hits a
// round's three passes alike; reports the median per-round ratio to greedy of each. Training the
// policy is edb-run's (--train-policy); bench/policy_batch_sizes.sh runs both.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <edbatch/edbatch.h>

#include "samples/models.h"
#include "samples/runner.h"
#include "tools/flags.h"
#include "tools/progress.h"

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

std::vector<int> parse_batches(const std::string& text) {
  std::vector<int> batches;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 1 || value > (1 << 20))
      throw edb::UsageError("edb-bench-policy-wall: --batches takes batch sizes from 1 to 1048576 separated by commas, "
                            "not '" + text + "'");
    batches.push_back(int(value));
  }
  if (batches.empty()) throw edb::UsageError("edb-bench-policy-wall: --batches names no batch size");
  return batches;
}

struct Measured {
  std::vector<double> rates;        // instances/s of each round's pass
  std::vector<double> schedule_ms;  // the schedule stage's milliseconds in each round's pass
  edb::Stats stats;                 // of the last round
  double loss = 0;
};

int run(int argc, char** argv) {
  edb::tools::Flags flags("edb-bench-policy-wall",
                          {"model", "data", "skip", "limit", "batches", "rounds", "policy", "policy-file", "executor",
                           "device", "json"},
                          {"help"});
  flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    std::printf(
        "usage: edb-bench-policy-wall --model NAME --policy-file FILE [--policy learned|fsm] [--data FILE]\n"
        "                             [--skip N] [--limit N] [--batches 1,4,16,64] [--rounds 31]\n"
        "                             [--executor jit] [--device cpu] [--json FILE]\n"
        "Greedy, the policy and greedy again (the control), one pass each per round in rotating order;\n"
        "the median per-round throughput ratio to greedy of each, per batch size.\n");
    return 0;
  }
  const std::string name = flags.get("model", "");
  const edb::samples::ModelEntry* entry = edb::samples::find_model(name);
  if (!entry)
    throw edb::UsageError("edb-bench-policy-wall: --model names a sample model (edb-run --help lists them), not '" +
                          name + "'");
  const std::string policy_file = flags.get("policy-file", "");
  if (policy_file.empty()) throw edb::UsageError("edb-bench-policy-wall: --policy-file FILE is required (edb-run --train-policy makes one)");
  const std::string policy = flags.get("policy", "learned");
  if (policy != "learned" && policy != "fsm")
    throw edb::UsageError("edb-bench-policy-wall: --policy takes learned or fsm, not '" + policy + "'");
  const std::vector<int> batches = parse_batches(flags.get("batches", "1,4,16,64"));
  const int rounds = int(flags.get_int("rounds", 31, 1, 1000));

  edb::samples::ModelConfig config;
  config.data_path = flags.get("data", "");
  config.skip = flags.get_int("skip", 0, 0, int64_t{1} << 40);
  config.limit = flags.get_int("limit", -1, 1, int64_t{1} << 40);
  config.embed = entry->default_embed;
  config.hidden = entry->default_hidden;

  // Three engines: greedy, the policy, greedy again. Engine options reject a bad executor, device
  // or policy file before any pass runs.
  std::vector<std::unique_ptr<edb::Engine>> engines;
  for (int e = 0; e < 3; ++e) {
    edb::EngineOptions options;
    options.policy = e == 1 ? policy : "greedy";
    if (e == 1) options.policy_file = policy_file;
    options.executor = flags.get("executor", options.executor);
    options.device = flags.get("device", "cpu");
    options.threads = 1;
    engines.push_back(std::make_unique<edb::Engine>(options));
  }
  const std::unique_ptr<edb::samples::SampleModel> model = entry->make(config);
  const char* labels[3] = {"greedy", policy.c_str(), "greedy (control)"};

  std::printf("%s, %s, executor %s, device %s, %d rounds; %s from %s\n", name.c_str(), model->describe_data().c_str(),
              engines[0]->options().executor.c_str(), engines[0]->options().device.c_str(), rounds, policy.c_str(),
              policy_file.c_str());
  std::printf("\n| batch | greedy batches/LB | %s batches/LB | %s / greedy (median) | control greedy / greedy (median, range) "
              "| schedule ms per pass (median), greedy / %s |\n|---:|---:|---:|---:|---:|---:|\n",
              policy.c_str(), policy.c_str(), policy.c_str());
  nlohmann::json rows = nlohmann::json::array();
  bool losses_agree = true;
  edb::tools::ProgressBar bar("edb-bench-policy-wall");
  for (int batch : batches) {
    Measured measured[3];
    std::vector<double> ratio, control;
    // Round -1 is not counted: an engine's first passes at a batch size pay for its kernels and
    // arena (run_inference's own warm-up pass does not cover all of it: greedy, first, ran 2x slower).
    for (int r = -1; r < rounds; ++r) {
      bar.update(r + 1, rounds + 1, "batch " + std::to_string(batch));
      double rate[3];
      for (int k = 0; k < 3; ++k) {
        const int e = (k + r + 3) % 3;  // each engine takes each place in the order as often
        edb::samples::RunOptions options;
        options.batch = batch;
        options.repeat = 1;
        const edb::samples::RunResult result = edb::samples::run_inference(*model, *engines[e], options);
        rate[e] = result.instances_per_sec;
        if (r < 0) continue;
        Measured& m = measured[e];
        m.rates.push_back(rate[e]);
        m.stats = result.stats;
        m.schedule_ms.push_back(result.stats.time.schedule_ms / double(std::max(result.repeat, 1)));
        m.loss = result.loss;
      }
      if (r < 0) continue;
      ratio.push_back(rate[1] / rate[0]);
      control.push_back(rate[2] / rate[0]);
    }
    bar.done();
    for (int e = 1; e < 3; ++e)
      losses_agree = losses_agree && std::fabs(measured[e].loss - measured[0].loss) <= 1e-5 * std::fabs(measured[0].loss) + 1e-6;
    auto per_lb = [](const edb::Stats& s) { return double(s.batches) / double(std::max<int64_t>(s.lower_bound, 1)); };
    const double low = *std::min_element(control.begin(), control.end());
    const double high = *std::max_element(control.begin(), control.end());
    std::printf("| %d | %.3f | %.3f | %.2fx | %.2fx (%.2f-%.2f) | %.2f / %.2f |\n", batch, per_lb(measured[0].stats),
                per_lb(measured[1].stats), median(ratio), median(control), low, high, median(measured[0].schedule_ms),
                median(measured[1].schedule_ms));
    std::fflush(stdout);
    nlohmann::json row{{"batch", batch}, {"ratio", median(ratio)}, {"control_ratio", median(control)},
                       {"ratios", ratio}, {"control_ratios", control}};
    for (int e = 0; e < 3; ++e)
      row[e == 0 ? "greedy" : e == 1 ? "policy" : "control"] = {
          {"label", labels[e]}, {"instances_per_sec", measured[e].rates}, {"batches", measured[e].stats.batches},
          {"lower_bound", measured[e].stats.lower_bound}, {"schedule_ms", measured[e].schedule_ms},
          {"loss", measured[e].loss}};
    rows.push_back(row);
  }
  std::printf("\nlosses agree across the three engines (1e-5 relative): %s\n", losses_agree ? "yes" : "NO");
  if (flags.has("json")) {
    std::ofstream out(flags.get("json", ""));
    if (!out) throw edb::UsageError("edb-bench-policy-wall: cannot write --json '" + flags.get("json", "") + "'");
    out << nlohmann::json{{"model", name}, {"policy", policy}, {"rounds", rounds}, {"rows", rows},
                          {"losses_agree", losses_agree}}.dump(2)
        << '\n';
  }
  return losses_agree ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return edb::tools::run_tool("edb-bench-policy-wall", run, argc, argv); }
