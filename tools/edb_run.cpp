// edb-run: runs a sample model on a workload with a chosen policy, executor and device, and prints
// throughput, batching counts and the time split as a table (or one JSON object with --json); with
// --train it trains the model instead and prints each epoch's losses, accuracy and times.
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <new>
#include <optional>
#include <string_view>
#include <nlohmann/json.hpp>

#include <edbatch/distributed.h>
#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include "ir/files.h"
#include "ir/isa.h"
#include "jit/host.h"
#include "runtime/executor.h"
#include "scheduler/schedule.h"
#include "samples/data/data.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "samples/training.h"
#include "tools/flags.h"
#include "tools/progress.h"
#include "tools/schedule_picture.h"
#include "trace/inspect.h"

namespace {

using edb::samples::ModelEntry;

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

void print_help() {
  std::string models;
  for (const ModelEntry& m : edb::samples::model_registry())
    models += "  " + m.name + std::string(14 - std::min<size_t>(13, m.name.size()), ' ') + m.summary + "\n";
  std::printf(
      "usage: edb-run MODEL [flags]\n\n"
      "Runs a sample model's inference over a workload and reports throughput, batches against the\n"
      "lower bound, and where the time went.\n\n"
      "models:\n%s\n"
      "flags:\n"
      "  --data FILE        workload file (default: a generated one)\n"
      "  --limit N          use the first N instances (generated default: 1000)\n"
      "  --skip N           leave out the first N instances (before --limit): measure on traces a\n"
      "                     policy was not trained on\n"
      "  --batch N          instances per trace (default 64)\n"
      "  --embed N          embedding size (default: the model's, 128 for treelstm)\n"
      "  --hidden N         hidden size (default: the model's, 128 for treelstm)\n"
      "  --policy NAME      batching policy: %s (default greedy)\n"
      "  --executor NAME    %s (default jit)\n"
      "  --device NAME      cpu, cuda (a GPU through NVRTC and the CUDA driver; an error naming why\n"
      "                     when there is none) or auto (cuda when usable, else the CPU, saying why)\n"
      "                     (default cpu)\n"
      "  --threads N        threads (default 1; 0: every core); with 2 or more, execution\n"
      "                     overlaps recording and a batch's kernel splits across them\n"
      "  --repeat N         measured passes over the workload; the median is reported (default 3)\n"
      "  --seed N           seed for parameters, generated data and training shuffles (default 1)\n"
      "  --train-policy FILE  (fsm, learned) learn the policy from --train-traces traces, save it to\n"
      "                     FILE, then run; learned holds a quarter of them out and reports on them\n"
      "  --train-traces N   traces to learn from (default 8)\n"
      "  --search-budget MS search: milliseconds to search each new trace shape (default 200);\n"
      "                     learned: per training trace (default 2000)\n"
      "  --policy-file FILE (fsm, learned) load a learned policy\n"
      "  --policy-encoding base|sort  (fsm) the state encoding (default base)\n"
      "  --cells on|off     on: each cell call is one node for the policy, with the cell's own\n"
      "                     fewest-batch schedule inside; off: cells record node by node (default on)\n"
      "  --memplan on|off   on: the PQ-tree layout planner places batched operands in place;\n"
      "                     off: each batch's outputs in schedule order (default off)\n"
      "  --dump-schedule FILE  write the first trace's graph with each batch as a coloured cluster:\n"
      "                     FILE.dot or .gv (graphviz text), or .svg, .png, .pdf rendered by graphviz's\n"
      "                     dot (apt-get install graphviz); keep it small: --batch 2 --limit 2\n"
      "  --check-finite     stop at the first NaN or infinity, naming the node that produced it\n"
      "  --per-call-backward  (jit, training) record one backward call per cell call and one node per\n"
      "                     node's rule, not one per forward batch (the way before, for comparison)\n"
      "  --load PATH        start from the model saved in PATH (and, with --train, the optimizer state\n"
      "                     in PATH.optimizer when present); the model's words, chars and tags keep\n"
      "                     their ids from PATH.vocab when present (words it lacks are <unk>), so\n"
      "                     --data may name other data than the training's\n"
      "  --decode           (parser) parse from the model's own predictions instead: each instance a\n"
      "                     program that awaits its scores, --batch of them run together per trace;\n"
      "                     reports instances/s, rounds (evaluations) and the heads found\n"
      "  --one-at-a-time    (--decode) run each instance's program alone in turn, reading its values\n"
      "                     one instance at a time: the baseline programs are measured against\n\n"
      "training (--train replaces the inference measurement; policy, executor, device, threads,\n"
      "cells, memplan and batch apply to it too):\n"
      "  --train            train the model: epochs over a shuffled training split, one optimizer step\n"
      "                     per --batch instances (their mean loss), the held-out split evaluated after\n"
      "                     each epoch against its majority class\n"
      "  --epochs N         epochs (default 1)\n"
      "  --optimizer NAME   sgd or adam (default adam)\n"
      "  --lr X             learning rate (default 0.01 for adam, 0.1 for sgd)\n"
      "  --momentum X       sgd momentum in [0, 1) (default 0)\n"
      "  --clip X           scale gradients whose global L2 norm exceeds X down to X (default 0: off)\n"
      "  --holdout F        the last fraction F of the instances is held out (default 0.1; 0: none)\n"
      "  --save PATH        after training, write the model to PATH and the optimizer state to\n"
      "                     PATH.optimizer as one unit (--load continues from both, and refuses\n"
      "                     two files of different saves), and the vocabularies to PATH.vocab;\n"
      "                     checked before training starts\n"
      "  --json             print one JSON object instead of the table\n"
      "  --help             this text\n\n"
      "Under mpirun (mpirun -np N edb-run MODEL --train ...), every rank trains its share of each\n"
      "global --batch and the gradients are summed over MPI before each step; rank 0 prints and saves\n"
      "(docs/training.md). Inference under more than one rank is an error.\n\n"
      "Environment: EDB_DUMP=ir,schedule,batches,plan (or all) prints each stage's output to stderr\n"
      "(schedule: the graph with batches as clusters, graphviz dot; batches: the same as text); with\n"
      "EDB_DUMP_DIR=DIR each goes to DIR/STAGE-N.txt instead, the schedule as DIR/schedule-N.dot.\n"
      "EDB_ISA=native|avx512|avx2|generic: the vector ISA of the compiled kernels (default native, the\n"
      "widest this CPU runs; a narrower one runs its code on this machine; a wider one is an error).\n"
      "EDB_SIDE_BY_SIDE=1: with two or more threads, run independent batches side by side, each whole\n"
      "on one thread, rather than each batch alone cut across the threads (0, the default).\n",
      models.c_str(), joined(edb::scheduler::policy_names()).c_str(), joined(edb::runtime::executor_names()).c_str());
}

// The first trace of the workload (its first --batch instances, as every pass records it) with its
// batches, as a picture in `path`. Nodes beyond a few thousand make graphviz slow: say so.
void dump_schedule(edb::samples::SampleModel& model, edb::Engine& engine, int batch, const std::string& path) {
  edb::Trace trace(engine);
  std::vector<edb::Expr> losses;
  for (size_t i = 0; i < std::min(model.instance_count(), size_t(batch)); ++i) losses.push_back(model.record_loss(trace, i));
  const edb::Expr total = edb::sum(losses);
  const edb::detail::EvaluatedTrace evaluated = edb::detail::evaluated_trace(total);
  constexpr size_t kLargePicture = 3000;
  if (evaluated.graph.size() > kLargePicture && !path.ends_with(".dot") && !path.ends_with(".gv"))
    std::fprintf(stderr, "edb-run: --dump-schedule: the trace has %zu nodes; graphviz takes long on pictures this big "
                 "(try --batch 2 --limit 2)\n", evaluated.graph.size());
  edb::tools::write_picture("edb-run: --dump-schedule",
                            edb::scheduler::to_dot(evaluated.graph, evaluated.schedule, evaluated.signatures), path);
}

struct Report {
  std::string model, policy, executor, device, data, cpu, isa;
  bool cells = true, memplan = false;
  int batch = 0, embed = 0, hidden = 0;
  edb::samples::RunResult result;
  bool trained = false;
  edb::PolicyProgress training;
  double training_ms = 0;
};

// The model's arithmetic rate at the median throughput (flops are the same every pass).
double gflops(const Report& r) {
  const int64_t instances = r.result.instances * r.result.repeat;
  return instances > 0 ? r.result.instances_per_sec * double(r.result.stats.flops) / double(instances) / 1e9 : 0.0;
}

// --train-policy's outcome: the learned table's batches against the lower bound, and its time.
nlohmann::json policy_training_json(const Report& r) {
  const edb::PolicyProgress& t = r.training;
  nlohmann::json j = {{"episodes", t.episode}, {"batches", t.best_batches}, {"lower_bound", t.lower_bound},
                      {"greedy_batches", t.greedy_batches}, {"beats_greedy", t.beats_greedy},
                      {"greedy_fallback", t.greedy_fallback}, {"states", t.states},
                      {"fallback_rate", t.fallback_rate}, {"stop_reason", t.stop_reason}, {"time_ms", r.training_ms}};
  if (t.heldout_traces > 0)
    j["heldout"] = {{"traces", t.heldout_traces}, {"batches", t.heldout_batches},
                    {"greedy_batches", t.heldout_greedy_batches}, {"lower_bound", t.heldout_lower_bound}};
  return j;
}

// Stats::caches: each cache's size and bound, as read at the end of the run.
nlohmann::json caches_json(const edb::CacheSizes& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, s] : c.named())
    j[name] = {{"entries", s->entries}, {"bytes", s->bytes}, {"max_entries", s->max_entries},
               {"max_bytes", s->max_bytes}, {"evictions", s->evictions}};
  return j;
}

nlohmann::json to_json(const Report& r) {
  const edb::Stats& s = r.result.stats;
  const auto& t = s.time;
  nlohmann::json j = {
      {"model", r.model},
      {"policy", r.policy},
      {"cells", r.cells},
      {"memplan", r.memplan},
      {"executor", r.executor},
      {"device", r.device},
      {"batch", r.batch},
      {"embed", r.embed},
      {"hidden", r.hidden},
      {"data", r.data},
      {"cpu", r.cpu},
      {"isa", r.isa},
      {"repeat", r.result.repeat},
      {"instances", r.result.instances * r.result.repeat},
      {"instances_per_sec", r.result.instances_per_sec},
      {"nodes", s.nodes},
      {"batches", s.batches},
      {"lower_bound", s.lower_bound},
      {"batches_per_lower_bound", s.lower_bound ? double(s.batches) / double(s.lower_bound) : 0.0},
      {"kernel_calls", s.kernel_calls},
      {"bytes_gathered", s.bytes_gathered},
      {"early_gradient_blocks", s.early_gradient_blocks},
      {"side_by_side_batches", s.side_by_side_batches},
      {"kernels_compiled", s.kernels_compiled},
      {"cache_hits", s.cache_hits},
      {"flops", s.flops},
      {"gflops_per_sec", gflops(r)},
      {"loss", r.result.loss},
      {"time_ms",
       {{"trace", r.result.trace_ms},
        {"schedule", t.schedule_ms},
        {"plan", t.plan_ms},
        {"compile", t.compile_ms},
        {"execute", t.execute_ms},
        {"total", r.result.total_ms}}},
  };
  j["caches"] = caches_json(s.caches);
  if (s.policy_decisions > 0) j["policy_unseen_rate"] = double(s.policy_unseen) / double(s.policy_decisions);
  if (r.trained) j["training"] = policy_training_json(r);
  return j;
}

std::string fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

std::string percent(double fraction) { return fixed(100 * fraction, 1) + "%"; }

void print_table(const Report& r) {
  const edb::Stats& s = r.result.stats;
  const double total = r.result.total_ms;
  auto row = [](const std::string& name, const std::string& value) {
    std::printf("| %-22s | %22s |\n", name.c_str(), value.c_str());
  };
  auto share = [&](double ms) { return fixed(ms, 1) + " ms (" + fixed(total > 0 ? 100 * ms / total : 0, 1) + "%)"; };
  std::printf("edb-run %s: %s\n", r.model.c_str(), r.data.c_str());
  std::printf("policy %s, cells %s, memplan %s, executor %s, device %s, batch %d, embed %d, hidden %d, CPU %s (ISA %s)\n\n",
              r.policy.c_str(), r.cells ? "on" : "off", r.memplan ? "on" : "off", r.executor.c_str(),
              r.device.c_str(), r.batch, r.embed, r.hidden, r.cpu.c_str(), r.isa.c_str());
  std::printf("| %-22s | %22s |\n|%s|%s|\n", "measure", "value", std::string(24, '-').c_str(),
              std::string(24, '-').c_str());
  row("instances/s (median)", fixed(r.result.instances_per_sec, 1));
  row("instances x passes", std::to_string(r.result.instances) + " x " + std::to_string(r.result.repeat));
  row("nodes", std::to_string(s.nodes));
  row("batches", std::to_string(s.batches));
  row("lower bound (LB)", std::to_string(s.lower_bound));
  row("batches / LB", s.lower_bound ? fixed(double(s.batches) / double(s.lower_bound), 3) : "-");
  row("kernel calls", std::to_string(s.kernel_calls));
  row("bytes gathered", std::to_string(s.bytes_gathered));
  row("kernels compiled", std::to_string(s.kernels_compiled));
  row("GFLOP/s (median pass)", fixed(gflops(r), 2));
  if (s.policy_decisions > 0)
    row("unseen policy states", fixed(100.0 * double(s.policy_unseen) / double(s.policy_decisions), 2) + "%");
  if (r.trained) {
    const edb::PolicyProgress& t = r.training;
    row("policy training", fixed(r.training_ms, 0) + " ms, " + std::to_string(t.episode) +
                               (r.policy == "learned" ? " traces searched" : " episodes"));
    row("training: batches", std::to_string(t.best_batches) + " (greedy " + std::to_string(t.greedy_batches) + ", LB " +
                                 std::to_string(t.lower_bound) + "): " + (t.beats_greedy ? "beats greedy" : "does not beat greedy") +
                                 (t.greedy_fallback ? "; runs greedy exactly (fallback)" : ""));
    if (t.heldout_traces > 0)
      row("held-out traces", std::to_string(t.heldout_traces) + ": " + std::to_string(t.heldout_batches) + " batches (greedy " +
                                 std::to_string(t.heldout_greedy_batches) + ", LB " + std::to_string(t.heldout_lower_bound) + ")");
    row("training: states", std::to_string(t.states) + ", fallback to greedy " + fixed(100.0 * t.fallback_rate, 1) + "%");
    row("training stopped", t.stop_reason);
  }
  row("loss (one pass)", fixed(r.result.loss, 4));
  row("time: trace", share(r.result.trace_ms));
  row("time: schedule", share(s.time.schedule_ms));
  row("time: plan", share(s.time.plan_ms));
  row("time: compile", share(s.time.compile_ms));
  row("time: execute", share(s.time.execute_ms));
  row("time: total", fixed(total, 1) + " ms");
}

// Writes nothing, but finds out before any work whether `path` can be written.
// --load PATH: the vocabularies saved beside the model (PATH.vocab), or none for a save without
// them (the ids are then built from --data, as the training's were when it was the same data).
std::shared_ptr<const edb::samples::SavedVocabularies> saved_vocabularies(const std::string& load_path) {
  const std::string path = load_path + ".vocab";
  if (!std::filesystem::exists(path)) return nullptr;
  if (const std::string why = edb::ir::unreadable_file_reason(path, edb::ir::kMaxModelFileBytes); !why.empty())
    throw edb::UsageError("edb-run: --load: '" + path + "' " + why);
  std::ifstream in(path);
  try {
    return std::make_shared<const edb::samples::SavedVocabularies>(edb::samples::parse_vocabularies(in, path));
  } catch (const edb::UsageError& e) {
    throw edb::UsageError(std::string("edb-run: --load: ") + e.what());
  }
}

void check_writable(const std::string& flag, const std::string& path) {
  if (const std::string why = edb::ir::unwritable_file_reason(path); !why.empty())
    throw edb::UsageError("edb-run: " + flag + ": " + why);
}

// --train and its flags. Training flags without --train, and --repeat with it, are errors.
struct TrainingSetup {
  edb::OptimizerOptions optimizer;
  edb::samples::TrainOptions options;
  std::string save_path;
  bool learning_rate_given = false, momentum_given = false, clip_given = false;
};

std::optional<TrainingSetup> training_setup(const edb::tools::Flags& flags, int batch, uint64_t seed) {
  if (!flags.has("train")) {
    for (const char* flag : {"epochs", "lr", "optimizer", "momentum", "clip", "holdout", "save"})
      if (flags.has(flag)) throw edb::UsageError(std::string("edb-run: --") + flag + " is for training; add --train");
    return std::nullopt;
  }
  if (flags.has("repeat")) throw edb::UsageError("edb-run: --repeat measures inference; with --train use --epochs");
  TrainingSetup setup;
  edb::OptimizerOptions& o = setup.optimizer;
  o.kind = flags.get("optimizer", "adam");
  if (o.kind != "sgd" && o.kind != "adam")
    throw edb::UsageError("edb-run: --optimizer takes sgd or adam, not '" + o.kind + "'");
  o.learning_rate = float(flags.get_double("lr", o.kind == "adam" ? 0.01 : 0.1, 0, 1e6));
  if (!(o.learning_rate > 0)) throw edb::UsageError("edb-run: --lr must be above 0, got " + flags.get("lr", ""));
  if (flags.has("momentum") && o.kind != "sgd") throw edb::UsageError("edb-run: --momentum is for --optimizer sgd");
  o.momentum = float(flags.get_double("momentum", 0, 0, 1));
  if (!(o.momentum < 1)) throw edb::UsageError("edb-run: --momentum must be below 1, got " + flags.get("momentum", ""));
  o.clip_norm = float(flags.get_double("clip", 0, 0, 1e30));
  edb::samples::TrainOptions& t = setup.options;
  t.epochs = int(flags.get_int("epochs", 1, 1, 1000000));
  t.holdout = flags.get_double("holdout", 0.1, 0, 1);
  if (!(t.holdout < 1)) throw edb::UsageError("edb-run: --holdout must be below 1, got " + flags.get("holdout", ""));
  t.batch = batch;
  t.seed = seed;
  setup.learning_rate_given = flags.has("lr");
  setup.momentum_given = flags.has("momentum");
  setup.clip_given = flags.has("clip");
  setup.save_path = flags.get("save", "");
  // Under mpirun rank 0 alone writes --save: the path need not exist on the other ranks' machines.
  if (flags.has("save") && edb::DataParallel::launched_rank() == 0) check_writable("--save", setup.save_path);
  return setup;
}

struct TrainingReport {
  edb::OptimizerOptions optimizer;
  double holdout = 0;
  std::string accuracy_unit, loaded, saved, optimizer_note;
  int ranks = 1;
  edb::samples::TrainResult result;
};

// Null fields when nothing is held out.
nlohmann::json evaluation_json(const edb::samples::Evaluation& e) {
  if (e.instances == 0)
    return {{"heldout_loss", nullptr}, {"heldout_accuracy", nullptr}, {"majority_accuracy", nullptr},
            {"heldout_position_accuracy", nullptr}, {"majority_position_accuracy", nullptr}};
  return {{"heldout_loss", e.loss},
          {"heldout_accuracy", e.accuracy()},
          {"majority_accuracy", e.majority_accuracy()},
          {"heldout_position_accuracy", e.position_accuracy()},
          {"majority_position_accuracy", e.position_majority_accuracy()}};
}

// One phase of training steps (the forward or the backward pass): what the engine did and where
// its time went.
nlohmann::json phase_json(const edb::Stats& s) {
  return {{"nodes", s.nodes},
          {"batches", s.batches},
          {"lower_bound", s.lower_bound},
          {"bytes_gathered", s.bytes_gathered},
          {"early_gradient_blocks", s.early_gradient_blocks},
          {"side_by_side_batches", s.side_by_side_batches},
          {"flops", s.flops},
          {"time_ms",
           {{"schedule", s.time.schedule_ms},
            {"plan", s.time.plan_ms},
            {"compile", s.time.compile_ms},
            {"execute", s.time.execute_ms},
            {"record_backward", s.time.record_backward_ms}}}};
}

nlohmann::json training_json(const Report& r, const TrainingReport& t) {
  nlohmann::json epochs = nlohmann::json::array();
  for (const edb::samples::EpochResult& e : t.result.epochs) {
    nlohmann::json j = evaluation_json(e.heldout);
    j["epoch"] = e.epoch;
    j["train_loss"] = e.train_loss;
    j["gradient_norm"] = e.gradient_norm;
    j["instances_per_sec"] = e.instances_per_sec;
    j["forward_ms"] = e.forward_ms;
    j["backward_ms"] = e.backward_ms;
    j["optimizer_ms"] = e.optimizer_ms;
    j["total_ms"] = e.total_ms;
    j["resident_mb"] = double(e.resident_kb) / 1024.0;
    j["caches"] = caches_json(e.caches);
    j["overlapped"] = e.overlapped;
    j["backward_over_forward"] = e.backward_over_forward();
    j["forward"] = phase_json(e.forward_stats);
    j["backward"] = phase_json(e.backward_stats);
    j["step_losses"] = e.step_losses;
    if (e.ranks > 1 || e.reduction.steps > 0) {
      const double steps = double(std::max<int64_t>(1, e.reduction.steps));
      j["distributed"] = {{"ranks", e.ranks},
                          {"steps", e.reduction.steps},
                          {"bytes_reduced_per_step", double(e.reduction.bytes) / steps},
                          {"reduce_start_ms_per_step", e.reduction.start_ms / steps},
                          {"reduce_wait_ms_per_step", e.reduction.wait_ms / steps},
                          {"reduce_wait_fraction", e.total_ms > 0 ? e.reduction.wait_ms / e.total_ms : 0.0}};
    }
    epochs.push_back(j);
  }
  nlohmann::json j = {
      {"model", r.model}, {"policy", r.policy}, {"cells", r.cells}, {"memplan", r.memplan},
      {"executor", r.executor}, {"device", r.device}, {"batch", r.batch}, {"embed", r.embed},
      {"hidden", r.hidden}, {"data", r.data}, {"cpu", r.cpu}, {"isa", r.isa},
      {"optimizer", {{"kind", t.optimizer.kind}, {"learning_rate", t.optimizer.learning_rate},
                     {"momentum", t.optimizer.momentum}, {"clip", t.optimizer.clip_norm}}},
      {"holdout", t.holdout},
      {"ranks", t.ranks},
      {"train_instances", t.result.split.train},
      {"heldout_instances", t.result.split.heldout},
      {"accuracy_unit", t.accuracy_unit},
      {"initial", evaluation_json(t.result.initial)},
      {"epochs", epochs},
  };
  if (!t.loaded.empty()) j["loaded"] = t.loaded;
  if (!t.saved.empty()) j["saved"] = t.saved;
  if (r.trained) j["policy_training"] = policy_training_json(r);
  return j;
}

void print_training_table(const Report& r, const TrainingReport& t) {
  const edb::samples::TrainResult& result = t.result;
  const std::string unit = t.accuracy_unit;
  std::printf("edb-run %s --train: %s\n", r.model.c_str(), r.data.c_str());
  std::printf("policy %s, cells %s, memplan %s, executor %s, device %s, batch %d, embed %d, hidden %d, CPU %s (ISA %s)\n",
              r.policy.c_str(), r.cells ? "on" : "off", r.memplan ? "on" : "off", r.executor.c_str(),
              r.device.c_str(), r.batch, r.embed, r.hidden, r.cpu.c_str(), r.isa.c_str());
  const std::string heldout = result.split.heldout == 0 ? "none held out"
                                                        : std::to_string(result.split.heldout) +
                                                              " held-out instances (the last " + number(t.holdout) + ")";
  std::printf("optimizer %s, lr %g, momentum %g, clip %g; %zu training, %s\n", t.optimizer.kind.c_str(),
              double(t.optimizer.learning_rate), double(t.optimizer.momentum), double(t.optimizer.clip_norm),
              result.split.train, heldout.c_str());
  if (!t.loaded.empty()) std::printf("loaded %s%s\n", t.loaded.c_str(), t.optimizer_note.c_str());
  const edb::samples::Evaluation& before = result.initial;
  if (result.split.heldout > 0)
    std::printf("held-out before training: loss %.4f, %s accuracy %s (majority class %s)\n", before.loss,
                unit.c_str(), percent(before.accuracy()).c_str(), percent(before.majority_accuracy()).c_str());
  std::printf("\n| epoch | train loss | held-out loss | %s acc | majority | all acc | instances/s | forward ms | "
              "backward ms | optimizer ms | bwd/fwd |\n",
              unit.c_str());
  std::printf("|------:|-----------:|--------------:|%s|---------:|--------:|------------:|-----------:|"
              "------------:|-------------:|--------:|\n",
              std::string(unit.size() + 6, '-').c_str());
  for (const edb::samples::EpochResult& e : result.epochs) {
    const bool held = result.split.heldout > 0;
    std::printf("| %5d | %10.4f | %13s | %*s | %8s | %7s | %11.1f | %10.1f | %11.1f | %12.1f | %7s |\n", e.epoch,
                e.train_loss, held ? fixed(e.heldout.loss, 4).c_str() : "-", int(unit.size() + 4),
                held ? percent(e.heldout.accuracy()).c_str() : "-",
                held ? percent(e.heldout.majority_accuracy()).c_str() : "-",
                held ? percent(e.heldout.position_accuracy()).c_str() : "-", e.instances_per_sec, e.forward_ms,
                e.backward_ms, e.optimizer_ms, e.overlapped ? "-" : fixed(e.backward_over_forward(), 2).c_str());
  }
  std::printf("\nLosses are per instance (summed over its labelled positions); \"all acc\" counts every labelled "
              "position; the majority class is the held-out split's most frequent gold class.\n");
  if (!result.epochs.empty() && result.epochs.back().overlapped)
    std::printf("With two or more threads a step's forward and backward passes run as one evaluation while the "
                "next step records: \"forward ms\" is recording, \"backward ms\" the wait for the evaluation "
                "(no bwd/fwd; its JSON value is 0).\n");
  if (!t.saved.empty())
    std::printf("saved the model to %s, the optimizer to %s.optimizer and the vocabularies to %s.vocab\n",
                t.saved.c_str(), t.saved.c_str(), t.saved.c_str());
}

// Trains after --load (the optimizer state too when PATH.optimizer exists: its steps say how many
// epochs of this split and batch were done, so numbering and shuffles continue), then --save.
// Across ranks (`parallel`), every rank trains its share; rank 0 alone shows progress, prints the
// report and saves, after every rank has checked that its weights are rank 0's.
int run_training(edb::samples::SampleModel& model, edb::Engine& engine, TrainingSetup setup, const Report& report,
                 const std::string& load_path, bool json, edb::DataParallel* parallel) {
  TrainingReport t;
  const bool first_rank = !parallel || parallel->rank() == 0;
  if (parallel) {
    t.ranks = parallel->size();
    setup.options.parallel = parallel;
  }
  t.optimizer = setup.optimizer;
  t.holdout = setup.options.holdout;
  t.accuracy_unit = model.accuracy_unit();
  edb::Optimizer optimizer(model.model(), setup.optimizer);
  if (!load_path.empty()) {
    t.loaded = load_path;
    const std::string state = load_path + ".optimizer";
    if (std::FILE* file = std::fopen(state.c_str(), "rb")) {
      std::fclose(file);
      edb::load_training(model.model(), optimizer, load_path);  // one save's pair; options too: only --lr may change
      const edb::OptimizerOptions& loaded = optimizer.options();
      auto differs = [&](bool given, const char* flag, float wanted, float kept) {
        if (given && wanted != kept)
          throw edb::UsageError("edb-run: --" + std::string(flag) + " " + number(wanted) + " differs from " +
                                number(kept) + " in " + state + " (only --lr can change when loading)");
      };
      differs(setup.momentum_given, "momentum", setup.optimizer.momentum, loaded.momentum);
      differs(setup.clip_given, "clip", setup.optimizer.clip_norm, loaded.clip_norm);
      if (setup.learning_rate_given) optimizer.set_learning_rate(setup.optimizer.learning_rate);
      t.optimizer = optimizer.options();
      const edb::samples::Split split = edb::samples::split_instances(model.instance_count(), setup.options.holdout);
      const int64_t per_epoch = int64_t((split.train + size_t(setup.options.batch) - 1) / size_t(setup.options.batch));
      setup.options.epochs_done = int(optimizer.steps() / per_epoch);
      t.optimizer_note = " and its optimizer state (" + std::to_string(optimizer.steps()) + " steps)";
      if (optimizer.steps() % per_epoch != 0 && first_rank)
        std::fprintf(stderr, "edb-run: %s holds %lld steps, not whole epochs of %lld; epochs count on from %d\n",
                     state.c_str(), static_cast<long long>(optimizer.steps()), static_cast<long long>(per_epoch),
                     setup.options.epochs_done);
    } else {
      t.optimizer_note = " (no optimizer state at " + state + ": the optimizer starts fresh)";
      if (first_rank) std::fprintf(stderr, "edb-run: no optimizer state at %s; the optimizer starts fresh\n", state.c_str());
    }
  }
  if (parallel) parallel->check_weights(load_path.empty() ? "at the start" : "after --load " + load_path);
  edb::tools::ProgressBar bar("edb-run " + report.model + " --train");
  if (first_rank) setup.options.progress = [&](const edb::samples::TrainProgress& p) {
    char note[128];
    std::snprintf(note, sizeof note, "epoch %d/%d, loss %.4f, %.1f instances/s", p.epoch, p.last_epoch, p.loss,
                  p.instances_per_sec);
    bar.update(p.done, p.total, note);
  };
  t.result = edb::samples::train(model, engine, optimizer, setup.options);
  bar.done();
  if (parallel) parallel->check_weights("at the end, before --save");  // no save from diverged weights
  if (!first_rank) return 0;
  // A save that fails (a full disk) still leaves the run's results on the screen.
  std::string save_error;
  if (!setup.save_path.empty()) {
    try {
      edb::save_training(model.model(), optimizer, setup.save_path);
      // Beside them, the ids' strings, so that --load on other data reads it with the same ids.
      const edb::samples::NamedVocabularies vocabularies = model.vocabularies();
      if (!vocabularies.empty()) {
        const std::string path = setup.save_path + ".vocab";
        if (const std::string why = edb::ir::write_file(path, edb::samples::vocabularies_text(vocabularies)); !why.empty())
          throw edb::UsageError(why);
      }
      t.saved = setup.save_path;
    } catch (const edb::UsageError& e) {
      save_error = e.what();
    }
  }
  if (json) std::cout << training_json(report, t).dump(2) << '\n';
  else print_training_table(report, t);
  if (!save_error.empty()) throw edb::UsageError("edb-run: --save: " + save_error);
  return 0;
}

// --train-policy: learns the fsm or learned policy and saves it to `path`.
void learn_policy(edb::samples::SampleModel& model, edb::Engine& engine, int traces, int batch,
                  const edb::PolicyTraining& options, const std::string& path, Report& report) {
  edb::tools::ProgressBar training_bar("learning the policy");
  const auto start = std::chrono::steady_clock::now();
  const edb::PolicyProgress learned = edb::samples::train_policy(
      model, engine, traces, batch, options,
      [&](const edb::PolicyProgress& p) {
        if (report.policy == "learned") return training_bar.update(p.episode, p.episodes, "traces searched");
        char note[96];
        std::snprintf(note, sizeof note, "episodes; batches/LB %.3f, best %.3f", double(p.batches) / double(p.lower_bound),
                      double(p.best_batches) / double(p.lower_bound));
        training_bar.update(p.episode, p.episodes, note);
      });
  training_bar.done();
  engine.save_policy(path);
  report.training_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  report.training = learned;
  report.trained = true;
}

// The flags that size a run's memory, as given: "--embed 65536 --hidden 65536".
std::string sizing_flags(const edb::tools::Flags& flags) {
  std::string given;
  for (const char* flag : {"limit", "skip", "batch", "embed", "hidden"})
    if (flags.has(flag)) given += (given.empty() ? "--" : " --") + std::string(flag) + " " + flags.get(flag, "");
  return given.empty() ? "the default sizes" : given;
}

// The model and its data, or a UsageError naming the flags when they ask for more memory than the
// machine has: the parameters are counted before they are allocated (edb::Model::add_parameter),
// training's copies (gradients, Adam's two moments) after.
std::unique_ptr<edb::samples::SampleModel> make_model(const ModelEntry& entry, const edb::samples::ModelConfig& config,
                                                      const edb::tools::Flags& flags, bool training) {
  std::unique_ptr<edb::samples::SampleModel> model;
  try {
    model = entry.make(config);
  } catch (const edb::UsageError& e) {
    if (!std::string_view(e.what()).starts_with("edb::Model::add_")) throw;
    throw edb::UsageError("edb-run: " + sizing_flags(flags) + ": " + e.what());
  }
  uint64_t bytes = 0;
  // By shape, not through values(): taking that span marks a parameter as written behind the
  // engine's back, and compiled cells then check its values before every use of them.
  for (const edb::Parameter& p : model->model().parameters()) bytes += p.read().size() * sizeof(float);
  for (const edb::LookupTable& t : model->model().lookups()) bytes += uint64_t(t.entries()) * uint64_t(t.dim()) * sizeof(float);
  if (training && config.memory_bytes > 0 && 4 * bytes > config.memory_bytes)
    throw edb::UsageError("edb-run: " + sizing_flags(flags) + ": training needs about " +
                          fixed(4 * double(bytes) / double(uint64_t{1} << 30), 1) +
                          " GiB (the model's values, gradients and the optimizer's two moments), more than the " +
                          fixed(double(config.memory_bytes) / double(uint64_t{1} << 30), 1) +
                          " GiB of memory this process may use");
  return model;
}

// --decode: the model parses from its own predictions (samples/runner.h run_decoding).
int run_decoding(edb::samples::SampleModel& model, edb::Engine& engine, edb::samples::RunOptions options,
                 bool one_at_a_time, const Report& r, bool json) {
  if (!model.decodes())
    throw edb::UsageError("edb-run: --decode is for models that decode from their own predictions (parser), not " + r.model);
  edb::tools::ProgressBar bar("edb-run " + r.model + " --decode");
  options.progress = [&](int64_t done, int64_t total) { bar.update(done, total, "instances"); };
  const edb::samples::DecodeResult d = edb::samples::run_decoding(model, engine, options, one_at_a_time);
  bar.done();
  const double accuracy = d.decoded.total ? double(d.decoded.correct) / double(d.decoded.total) : 0.0;
  const double rounds = double(d.rounds) / double(d.repeat);
  if (json) {
    const nlohmann::json j = {{"model", r.model}, {"decode", true}, {"one_at_a_time", one_at_a_time},
                              {"policy", r.policy}, {"executor", r.executor}, {"device", r.device},
                              {"data", r.data}, {"batch", r.batch}, {"embed", r.embed}, {"hidden", r.hidden},
                              {"instances", d.instances}, {"repeat", d.repeat},
                              {"instances_per_sec", d.instances_per_sec}, {"rounds_per_pass", rounds},
                              {"correct", d.decoded.correct}, {"total", d.decoded.total}, {"accuracy", accuracy},
                              {"unit", model.decoded_unit()}, {"nodes", d.stats.nodes},
                              {"batches", d.stats.batches}, {"lower_bound", d.stats.lower_bound},
                              {"total_ms", d.total_ms}, {"schedule_ms", d.stats.time.schedule_ms},
                              {"plan_ms", d.stats.time.plan_ms}, {"execute_ms", d.stats.time.execute_ms},
                              {"kernel_calls", d.stats.kernel_calls}};
    std::cout << j.dump(2) << '\n';
    return 0;
  }
  std::printf("edb-run %s --decode%s: %s\n", r.model.c_str(), one_at_a_time ? " --one-at-a-time" : "", r.data.c_str());
  std::printf("policy %s, executor %s, device %s, batch %d, %lld instances x %d passes\n\n", r.policy.c_str(),
              r.executor.c_str(), r.device.c_str(), r.batch, (long long)d.instances, d.repeat);
  std::printf("| instances/s | rounds per pass | %s acc | batches | lower bound | nodes |\n", model.decoded_unit().c_str());
  std::printf("|------------:|----------------:|---------:|--------:|------------:|------:|\n");
  std::printf("| %11.1f | %15.0f | %8.4f | %7lld | %11lld | %5lld |\n", d.instances_per_sec, rounds, accuracy,
              (long long)d.stats.batches, (long long)d.stats.lower_bound, (long long)d.stats.nodes);
  return 0;
}

int run(int argc, char** argv) {
  edb::tools::Flags flags("edb-run",
                          {"data", "limit", "batch", "embed", "hidden", "policy", "executor", "device",
                           "threads", "repeat", "seed", "train-policy", "train-traces", "policy-file", "skip", "search-budget",
                           "policy-encoding", "cells", "memplan", "dump-schedule", "epochs", "lr", "optimizer",
                           "momentum", "clip", "holdout", "save", "load"},
                          {"json", "check-finite", "per-call-backward", "train", "help", "decode", "one-at-a-time"});
  const std::vector<std::string> positional = flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    print_help();
    return 0;
  }
  if (positional.size() != 1)
    throw edb::UsageError(positional.empty() ? "edb-run: which model? (see --help)"
                                             : "edb-run: expected one MODEL, got " + std::to_string(positional.size()) +
                                                   " arguments (see --help)");
  const ModelEntry* entry = edb::samples::find_model(positional[0]);
  if (!entry) throw edb::UsageError("edb-run: unknown model '" + positional[0] + "' (see --help)");

  edb::samples::ModelConfig config;
  config.data_path = flags.get("data", "");
  config.limit = flags.get_int("limit", -1, 1, int64_t{1} << 40);
  config.skip = flags.get_int("skip", 0, 0, int64_t{1} << 40);
  config.embed = int(flags.get_int("embed", entry->default_embed, 1, 1 << 16));
  config.hidden = int(flags.get_int("hidden", entry->default_hidden, 1, 1 << 16));
  config.seed = uint64_t(flags.get_int("seed", 1, 0, INT64_MAX));
  config.memory_bytes = edb::ir::memory_bytes();

  edb::EngineOptions options;
  options.policy = flags.get("policy", options.policy);
  options.executor = flags.get("executor", options.executor);
  options.device = flags.get("device", "cpu");
  options.threads = int(flags.get_int("threads", 1, 0, 1024));
  options.policy_file = flags.get("policy-file", "");
  options.policy_encoding = flags.get("policy-encoding", "base");
  const std::string cells = flags.get("cells", "on");
  if (cells != "on" && cells != "off") throw edb::UsageError("edb-run: --cells takes on or off, not '" + cells + "'");
  options.cells = cells == "on";
  const std::string memplan = flags.get("memplan", "off");
  if (memplan != "on" && memplan != "off")
    throw edb::UsageError("edb-run: --memplan takes on or off, not '" + memplan + "'");
  options.memplan = memplan == "on";
  options.check_finite = flags.has("check-finite");
  options.batched_backward = !flags.has("per-call-backward");
  const std::string train_path = flags.get("train-policy", "");
  const int train_traces = int(flags.get_int("train-traces", 8, 1, 10000));
  if (!train_path.empty() && options.policy != "fsm" && options.policy != "learned")
    throw edb::UsageError("edb-run: --train-policy learns the fsm or learned policy; add --policy learned (or fsm)");
  edb::PolicyTraining policy_training;
  if (flags.has("search-budget")) {
    if (options.policy != "search" && options.policy != "learned")
      throw edb::UsageError("edb-run: --search-budget is for --policy search or learned");
    const int64_t budget = flags.get_int("search-budget", 200, 1, int64_t{1} << 30);
    options.search_budget_ms = budget;
    policy_training.search_budget_ms = budget;
  }
  if (!train_path.empty()) check_writable("--train-policy", train_path);
  const std::string schedule_path = flags.get("dump-schedule", "");
  if (flags.has("dump-schedule")) edb::tools::check_picture_path("edb-run: --dump-schedule", schedule_path);
  edb::samples::RunOptions run_options;
  run_options.batch = int(flags.get_int("batch", 64, 1, 1 << 20));
  run_options.repeat = int(flags.get_int("repeat", 3, 1, 1000));
  const std::optional<TrainingSetup> training = training_setup(flags, run_options.batch, config.seed);
  if (flags.has("decode") && training) throw edb::UsageError("edb-run: --decode runs inference; drop --train (or --decode)");
  if (flags.has("one-at-a-time") && !flags.has("decode")) throw edb::UsageError("edb-run: --one-at-a-time is for --decode");
  const std::string load_path = flags.get("load", "");

  edb::Engine engine(options);  // rejects unknown or unavailable names before any work
  if (!load_path.empty()) config.vocabularies = saved_vocabularies(load_path);
  const std::unique_ptr<edb::samples::SampleModel> model = make_model(*entry, config, flags, training.has_value());
  if (!load_path.empty()) model->model().load(load_path);
  // Started by mpirun: every rank trains its share of each global batch (--train only).
  std::unique_ptr<edb::DataParallel> parallel;
  if (edb::DataParallel::launched()) {
    const int ranks = edb::DataParallel::launched_size();
    if (!training && ranks > 1)
      throw edb::UsageError("edb-run: started by an MPI launcher with " + std::to_string(ranks) +
                            " ranks: only --train runs across ranks; run inference without mpirun");
    if (training) {
      if (!edb::DataParallel::available() && ranks > 1)
        throw edb::UsageError("edb-run: started by an MPI launcher with " + std::to_string(ranks) +
                              " ranks, but this edb-run was built without MPI (configure with -DEDB_MPI=ON after "
                              "installing libopenmpi-dev): each rank would train alone");
      if (edb::DataParallel::available()) parallel = std::make_unique<edb::DataParallel>(model->model());
    }
  }
  if (parallel) {
    try {
      std::string arguments;
      for (int i = 1; i < argc; ++i) arguments += std::string(i > 1 ? " " : "") + argv[i];
      parallel->check_same("the command lines", arguments);
      parallel->check_same("the data (description and instance count)",
                           model->describe_data() + ", " + std::to_string(model->instance_count()) + " instances");
    } catch (const std::exception& e) {
      parallel->abort("edb-run", e.what(), 2);
    }
  }

  Report report;
  report.model = entry->name;
  report.policy = options.policy;
  report.executor = options.executor;
  report.cells = options.cells;
  report.memplan = options.memplan;
  report.device = engine.options().device;  // with auto: the one the engine chose
  report.data = model->describe_data();
  report.cpu = edb::jit::host_cpu_name();
  report.isa = edb::ir::isa_name(edb::ir::selected_isa());
  report.batch = run_options.batch;
  report.embed = config.embed;
  report.hidden = config.hidden;
  if (!train_path.empty())
    learn_policy(*model, engine, train_traces, run_options.batch, policy_training, train_path, report);
  if (!schedule_path.empty()) dump_schedule(*model, engine, run_options.batch, schedule_path);
  if (training && parallel) {
    // A failure on one rank would leave the others waiting in a collective: it ends them all.
    try {
      return run_training(*model, engine, *training, report, load_path, flags.has("json"), parallel.get());
    } catch (const edb::UsageError& e) {
      std::string_view message = e.what();
      if (message.starts_with("edb-run: ")) message.remove_prefix(9);
      parallel->abort("edb-run", std::string(message), 2);
    } catch (const std::exception& e) {
      parallel->abort("edb-run", e.what(), 1);
    }
  }
  if (training) return run_training(*model, engine, *training, report, load_path, flags.has("json"), nullptr);
  if (flags.has("decode")) return run_decoding(*model, engine, run_options, flags.has("one-at-a-time"), report, flags.has("json"));

  edb::tools::ProgressBar bar("edb-run " + entry->name);
  run_options.progress = [&](int64_t done, int64_t total) { bar.update(done, total, "instances"); };
  report.result = edb::samples::run_inference(*model, engine, run_options);
  bar.done();
  if (flags.has("json")) std::cout << to_json(report).dump(2) << '\n';
  else print_table(report);
  return 0;
}

}  // namespace

// What a run asks for beyond what is checked before (the trace's values at --batch and --hidden)
// can still exhaust the memory: one line naming the flags that size it, not "std::bad_alloc".
int run_or_name_the_sizes(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::string given;
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      for (const char* flag : {"--limit", "--skip", "--batch", "--embed", "--hidden"})
        if (arg.starts_with(flag)) given += " " + std::string(arg) + (arg == flag && i + 1 < argc ? " " + std::string(argv[i + 1]) : "");
    }
    throw edb::UsageError("edb-run: out of memory: the run asked for more than this machine has; the flags that size it:" +
                          (given.empty() ? std::string(" the defaults (--batch 64, the model's --embed and --hidden)") : given));
  }
}

int main(int argc, char** argv) { return edb::tools::run_tool("edb-run", run_or_name_the_sizes, argc, argv); }
