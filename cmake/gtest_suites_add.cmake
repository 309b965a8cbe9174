# Run at build time by ht_discover_test_suites (gtest_suites.cmake): lists a GoogleTest binary's
# suites and writes the CTest file that runs each suite as one test.
execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
  WORKING_DIRECTORY "${WORKING_DIR}" TIMEOUT 60
  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "listing the tests of ${TEST_EXECUTABLE} failed (${rc}):\n${listing}${errors}")
endif()

string(REPLACE "\n" ";" lines "${listing}")
set(script "")
set(count 0)
foreach(line IN LISTS lines)
  # A suite line starts in column 0 and ends its name with '.'; typed suites add "  # TypeParam = ...".
  if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.(  #.*)?$")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND script
      "add_test([=[${suite}]=] [==[${TEST_EXECUTABLE}]==] [==[--gtest_filter=${suite}.*]==])\n"
      # No SKIP_REGULAR_EXPRESSION: CTest lets it win over a failing exit code, and a suite whose
      # cases all fail also prints "[  PASSED  ] 0 tests". A suite that skips (CUDA without a GPU)
      # passes, with "[  SKIPPED ]" in its output.
      "set_tests_properties([=[${suite}]=] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIR}]==]"
      " ENVIRONMENT [==[${TEST_ENVIRONMENT}]==])\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} lists no test suites:\n${listing}")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
