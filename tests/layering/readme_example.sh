#!/usr/bin/env bash
# Every code line of the README's library example is a line of examples/custom_module.cpp, which
# the build compiles with -Wpedantic: the README cannot show code that does not compile.
#   usage: readme_example.sh SOURCE_DIR
set -euo pipefail
cd "${1:?source dir}"
block=$(awk '/^## As a library/{f=1} f&&/^```cpp/{g=1;next} g&&/^```/{exit} g' README.md)
[ -n "$block" ] || { echo "README.md has no cpp block under '## As a library'"; exit 1; }
missing=0
while IFS= read -r line; do
  code=$(printf '%s' "$line" | sed 's/^[[:space:]]*//')
  [ -z "$code" ] && continue
  if ! grep -qF -- "$code" examples/custom_module.cpp; then
    echo "README line not in examples/custom_module.cpp: $code"
    missing=$((missing + 1))
  fi
done <<< "$block"
[ "$missing" -eq 0 ] && echo "the README's example is examples/custom_module.cpp's code"
exit "$missing"
