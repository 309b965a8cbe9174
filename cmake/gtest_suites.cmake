# Registers a GoogleTest binary with CTest as one test per suite (`Suite.*`) instead of one per case.
# Why: every test process pays ~0.85 s loading libtorch before its first line runs; at one process
# per case the suite's 450-odd cases paid it ~400 s, 40 % of the whole suite on 2 cores.
# HT_TEST_PER_CASE=ON restores CMake's per-case registration (gtest_discover_tests).
set(HT_GTEST_SUITES_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/gtest_suites_add.cmake")
# Every GoogleTest suite's environment. GOMP_SPINCOUNT=10000: the binaries pin 2 threads
# (test_main.cpp) and libgomp's idle threads spin ~300k times before sleeping; with the cores
# shared, HybridStrategy and NowcastStrategy took 321 s instead of 4.6 s (timeouts on a loaded
# runner). Spinning 10k: 4.8 s alone, 41 s loaded; never spinning (OMP_WAIT_POLICY=PASSIVE) 8.0 s
# and 50-62 s.
set(HT_TEST_ENVIRONMENT "GOMP_SPINCOUNT=10000")

function(ht_discover_test_suites target)
  if(HT_TEST_PER_CASE)
    gtest_discover_tests(${target} DISCOVERY_TIMEOUT 60 PROPERTIES ENVIRONMENT "${HT_TEST_ENVIRONMENT}")
    return()
  endif()
  set(base "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites")
  # Relinks (and so re-lists) when the listing script changes: a POST_BUILD step has no DEPENDS.
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${HT_GTEST_SUITES_SCRIPT}")
  # Listed after every build, as gtest_discover_tests does, so new cases need no re-configure.
  add_custom_command(TARGET ${target} POST_BUILD
    BYPRODUCTS "${base}_tests.cmake"
    COMMAND "${CMAKE_COMMAND}" -D "TEST_EXECUTABLE=$<TARGET_FILE:${target}>"
            -D "WORKING_DIR=${CMAKE_CURRENT_BINARY_DIR}" -D "CTEST_FILE=${base}_tests.cmake"
            -D "TEST_ENVIRONMENT=${HT_TEST_ENVIRONMENT}"
            -P "${HT_GTEST_SUITES_SCRIPT}"
    VERBATIM)
  file(WRITE "${base}_include.cmake"
    "if(EXISTS \"${base}_tests.cmake\")\n"
    "  include(\"${base}_tests.cmake\")\n"
    "else()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${base}_include.cmake")
endfunction()
