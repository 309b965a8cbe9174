#!/usr/bin/env bash
# Fails when a layer includes a header of a layer above it, or an installed header includes a
# private one. The link already fails for calls; this catches includes (inline code, templates).
#   usage: check_includes.sh SOURCE_DIR
set -euo pipefail
root=${1:?source dir}
cd "$root"

# The layers each layer may include, itself first. Public headers: "hybrid/<layer>/x.h";
# private ones: "<layer>/x.h" (the hybrid layer's own: "hybrid/x.h"), or a file beside the source.
declare -A allowed=(
  [core]="core"
  [kernels]="kernels core"
  [hybrid]="hybrid core"
  [models]="models kernels core"
  [data]="data core"
  [dist]="dist kernels core"
)

layer_of_include() {  # prints the layer an include path belongs to, or nothing for a system header
  local inc=$1
  case "$inc" in
    hybrid/core/*|hybrid/kernels/*|hybrid/hybrid/*|hybrid/models/*|hybrid/data/*|hybrid/dist/*)
      inc=${inc#hybrid/}; echo "${inc%%/*}" ;;
    hybrid/*) echo hybrid ;;                 # the hybrid layer's private headers
    core/*|kernels/*|models/*|data/*|dist/*) echo "${inc%%/*}" ;;
    *) ;;
  esac
}

is_private() {
  case "$1" in
    hybrid/core/*|hybrid/kernels/*|hybrid/hybrid/*|hybrid/models/*|hybrid/data/*|hybrid/dist/*) return 1 ;;
    hybrid/*|core/*|kernels/*|models/*|data/*|dist/*) return 0 ;;
    *) return 1 ;;
  esac
}

failures=0
for layer in "${!allowed[@]}"; do
  for dir in "src/$layer" "include/hybrid/$layer"; do
    [ -d "$dir" ] || continue
    while IFS= read -r file; do
      while IFS= read -r inc; do
        target=$(layer_of_include "$inc")
        [ -n "$target" ] || continue
        if [[ " ${allowed[$layer]} " != *" $target "* ]]; then
          echo "layering: $file includes \"$inc\": the $layer layer may use only: ${allowed[$layer]}"
          failures=$((failures + 1))
        fi
        if [[ $dir == include/* ]] && is_private "$inc"; then
          echo "layering: installed header $file includes the private header \"$inc\""
          failures=$((failures + 1))
        fi
      done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
    done < <(find "$dir" -name '*.h' -o -name '*.cpp')
  done
done
if [ "$failures" -gt 0 ]; then
  echo "layering: $failures violation(s)"
  exit 1
fi
echo "layering: every include stays within its layer and the layers below it"
