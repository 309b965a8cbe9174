#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite with ctest (unit and end-to-end tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# Each test process uses 2 threads; running two at once on 2 cores only adds contention.
ctest --test-dir build --output-on-failure --timeout 600 "$@"
