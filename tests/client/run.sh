#!/usr/bin/env bash
# Installs the built project into a scratch prefix, builds tests/client against it alone (as a
# user's project would, with find_package) and runs it. Usage: run.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ht-client-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build" --prefix "$scratch/prefix" > "$scratch/install.log"
# Nothing of the source tree is visible to the client: only the installed headers and libraries.
cp "$src/tests/client/CMakeLists.txt" "$src/tests/client/client.cpp" "$scratch/"
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$scratch" -B "$scratch/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" > "$scratch/configure.log" || { cat "$scratch/configure.log"; exit 1; }
cmake --build "$scratch/build" > "$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; exit 1; }
if grep -q "warning:" "$scratch/build.log"; then
  echo "the client compiles with warnings under -Wpedantic:"; grep -A3 "warning:" "$scratch/build.log"; exit 1
fi
cd "$scratch" && ./build/client
