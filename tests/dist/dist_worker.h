// Data-parallel tests run ranks as processes: the test binary starts copies of itself with
// HT_DIST_WORKER set, and those run one rank of a scenario (dist_test.cpp) instead of the tests.
#pragma once

#include <string>

namespace ht::testing {

// The rank's work for HT_DIST_WORKER; returns the process exit code.
int run_dist_worker(const std::string& scenario);

}  // namespace ht::testing
