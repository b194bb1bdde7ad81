// The driver: evaluates the not-yet-evaluated part of a trace's graph, stage by stage
// (types -> schedule -> plan -> execute), with EDB_DUMP printing each stage's output.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "edbatch/edbatch.h"
#include "ir/ir.h"
#include "ir/signature.h"
#include "memplan/plan.h"
#include "runtime/arena.h"
#include "runtime/executor.h"
#include "scheduler/schedule.h"
#include "scheduler/type_chains.h"

namespace edb::runtime {

// Everything one trace owns between evaluations. Reused across traces, so memory is too.
struct TraceData {
  ir::Graph graph;
  std::vector<ir::TypeId> types;  // per node; the trace interns them as it records
  scheduler::Schedule schedule;
  memplan::Plan plan;
  Arena arena;
  ir::NodeId evaluated = 0;  // nodes [0, evaluated) have values

  void clear();
  Values values() { return Values{graph, plan, arena.data()}; }
};

// Which stages EDB_DUMP asks to print ("ir,schedule,plan" or "all").
struct DumpFlags {
  bool ir = false, schedule = false, plan = false;
  static DumpFlags from_environment();
};

class Driver {
 public:
  explicit Driver(const EngineOptions& options);
  void evaluate(TraceData& trace);

  const EngineOptions& options() const { return options_; }
  Stats stats;
  ir::SignatureTable signatures;

 private:
  EngineOptions options_;
  std::unique_ptr<scheduler::Policy> policy_;
  std::unique_ptr<Executor> executor_;
  DumpFlags dump_;
  scheduler::Analysis analysis_;
};

}  // namespace edb::runtime
