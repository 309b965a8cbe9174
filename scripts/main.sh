#!/usr/bin/env bash
# The main job: set up, build, and train the default model (tiny GPT on the King James Bible) for
# a few minutes; prints validation loss and a generated sample. Re-running resumes the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
exec ./build/hybrid-train train configs/tiny-gpt-kjv.toml "$@"
