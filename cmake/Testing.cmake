# What every ctest test shares: a kernel cache of the run's own (EDB_CACHE_DIR), emptied when a
# ctest run starts (the fixture test kernel_cache.empty, which ctest adds to any selection), so no
# test reads or writes ~/.cache/edbatch or sees kernels that another build or run cached.
# EDB_TEST_PROPERTIES is for gtest_discover_tests; edb_hermetic_tests() gives them to the tests a
# folder adds with add_test, and is called last in each CMakeLists.txt that adds tests.
set(EDB_TEST_KERNEL_CACHE ${PROJECT_BINARY_DIR}/test-kernel-cache)
set(EDB_TEST_PROPERTIES ENVIRONMENT EDB_CACHE_DIR=${EDB_TEST_KERNEL_CACHE} FIXTURES_REQUIRED edb_test_kernel_cache)

add_test(NAME kernel_cache.empty COMMAND ${CMAKE_COMMAND} -E rm -rf ${EDB_TEST_KERNEL_CACHE})
set_tests_properties(kernel_cache.empty PROPERTIES LABELS unit FIXTURES_SETUP edb_test_kernel_cache)

function(edb_hermetic_tests)
  get_property(tests DIRECTORY PROPERTY TESTS)
  list(REMOVE_ITEM tests kernel_cache.empty)
  foreach(test IN LISTS tests)
    get_test_property(${test} ENVIRONMENT environment)
    if(NOT environment)
      set(environment "")
    endif()
    list(FILTER environment EXCLUDE REGEX "^EDB_CACHE_DIR=")
    list(APPEND environment EDB_CACHE_DIR=${EDB_TEST_KERNEL_CACHE})
    set_tests_properties(${test} PROPERTIES ENVIRONMENT "${environment}" FIXTURES_REQUIRED edb_test_kernel_cache)
  endforeach()
endfunction()

# The check that no test escapes: every test ctest knows (the discovered GoogleTest cases too)
# carries the private cache.
add_test(NAME harness.every_test_has_the_private_kernel_cache
  COMMAND ${CMAKE_COMMAND} -DCTEST=${CMAKE_CTEST_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR}
          -DCACHE_DIR=${EDB_TEST_KERNEL_CACHE} -P ${PROJECT_SOURCE_DIR}/tests/scripts/check_test_environment.cmake)
set_tests_properties(harness.every_test_has_the_private_kernel_cache PROPERTIES LABELS unit)
edb_hermetic_tests()
