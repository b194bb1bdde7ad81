# Each public header alone: compiles with nothing but include/ on the path, and opens (directly or
# through others) no header of LLVM, Eigen or CUDA. Run by ctest:
#   cmake -DCXX=compiler -DINCLUDE_DIR=dir -P check_public_headers.cmake
file(GLOB headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/edbatch/*.h")
if(NOT headers)
  message(FATAL_ERROR "no public headers under ${INCLUDE_DIR}/edbatch")
endif()
# Path pieces that only those libraries' headers have (a compiler's own llvm-19/ folder is fine).
set(forbidden "/llvm/" "/llvm-c/" "/eigen3/" "/Eigen/" "/unsupported/Eigen/" "/cuda" "/nvrtc" "/cuda_")
foreach(header IN LISTS headers)
  # -H lists every file the preprocessor opens, one per line, on stderr.
  execute_process(
    COMMAND "${CXX}" -std=c++20 -fsyntax-only -H -x c++ "-I${INCLUDE_DIR}" "${INCLUDE_DIR}/${header}"
    RESULT_VARIABLE status ERROR_VARIABLE listing)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${header} does not compile on its own:\n${listing}")
  endif()
  string(REPLACE "\n" ";" lines "${listing}")
  set(offending "")
  foreach(line IN LISTS lines)
    foreach(piece IN LISTS forbidden)
      string(FIND "${line}" "${piece}" at)
      if(NOT at EQUAL -1)
        string(APPEND offending "  ${line}\n")
        break()
      endif()
    endforeach()
  endforeach()
  if(offending)
    message(FATAL_ERROR "${header} opens headers of LLVM, Eigen or CUDA:\n${offending}")
  endif()
  message(STATUS "${header}: compiles alone, opens no LLVM, Eigen or CUDA header")
endforeach()
