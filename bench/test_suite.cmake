# ctest bench_suite: runs edb-bench on one model, two batch sizes, one run of 8 instances, then
# edb-bench-check on its report; then shows the check fails on a damaged plot and a missing row.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(ENV{EDB_CACHE_DIR} ${WORK}/kernel-cache)
set(matrix --models treelstm --batches 1,8 --runs 1)
set(all --policies sequential,depth,agenda,greedy,fsm,learned,search --executors reference,batched,jit)

execute_process(COMMAND ${BENCH} ${matrix} --limit 8 --out ${WORK}/report --json ${WORK}/copy.json
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "edb-bench failed (${status}):\n${out}\n${err}")
endif()
foreach(expected "| treelstm | 8 | greedy | jit |" "| treelstm | 1 | sequential | reference |" "GEMM rate")
  string(FIND "${out}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "edb-bench's table lacks '${expected}':\n${out}")
  endif()
endforeach()
if(NOT EXISTS ${WORK}/copy.json)
  message(FATAL_ERROR "edb-bench --json wrote nothing")
endif()

execute_process(COMMAND ${CHECK} ${WORK}/report ${matrix} ${all} --instances 8 RESULT_VARIABLE status
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "edb-bench-check failed:\n${out}\n${err}")
endif()
message(STATUS "${out}")

# The check must be able to fail: a plot cut short (its closing tag lost) ...
file(COPY ${WORK}/report/ DESTINATION ${WORK}/broken)
file(READ ${WORK}/broken/throughput-treelstm.svg svg)
string(REPLACE "</svg>" "" svg "${svg}")
file(WRITE ${WORK}/broken/throughput-treelstm.svg "${svg}")
execute_process(COMMAND ${CHECK} ${WORK}/broken ${matrix} ${all} --instances 8 RESULT_VARIABLE status
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(status EQUAL 0 OR NOT err MATCHES "never closed")
  message(FATAL_ERROR "edb-bench-check accepted a plot without </svg> (${status}): ${err}")
endif()
# ... and a batch size that was not run.
execute_process(COMMAND ${CHECK} ${WORK}/report --models treelstm --batches 1,8,32 --runs 1 ${all} --instances 8
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(status EQUAL 0 OR NOT err MATCHES "treelstm greedy/batched 32 appears 0 times")
  message(FATAL_ERROR "edb-bench-check accepted a missing batch size (${status}): ${err}")
endif()
