// Read-only views of a trace's internals for tools and tests that show what was batched
// (edb-run --dump-schedule). Not public API: include/edbatch/ stays free of the IR.
#pragma once

#include <edbatch/edbatch.h>

#include "ir/ir.h"
#include "ir/signature.h"
#include "scheduler/schedule.h"

namespace edb::detail {

struct EvaluatedTrace {
  const ir::Graph& graph;
  const scheduler::Schedule& schedule;  // the last evaluation's: the nodes recorded since the one before
  const ir::SignatureTable& signatures; // the engine's names of the batch types
};

// Evaluates what the trace of `e` recorded so far (as Expr::value() does) and returns its graph and
// schedule, valid until the trace records, runs or finishes. UsageError when `e` is empty or stale.
EvaluatedTrace evaluated_trace(const Expr& e);

}  // namespace edb::detail
