#!/usr/bin/env bash
# The C++ API reference builds from the public headers with no Doxygen warning (an undocumented
# public symbol is one), and has the pages a user looks for. $1: the build folder.
set -euo pipefail
build=$1
command -v doxygen >/dev/null || { echo "FAILED: doxygen is not installed (scripts/setup.sh installs it)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s|^OUTPUT_DIRECTORY.*|OUTPUT_DIRECTORY = $work|" \
  "$build/docs/api/Doxyfile" >"$work/Doxyfile"
if ! doxygen "$work/Doxyfile" >"$work/log" 2>&1; then
  grep -i warning "$work/log" | head -40
  echo "FAILED: doxygen warned $(grep -ci warning "$work/log") times"
  exit 1
fi
for page in index.html classloom_1_1nn_1_1Cell.html classloom_1_1Tensor.html \
            classloom_1_1nn_1_1Model.html classloom_1_1optim_1_1Momentum.html \
            namespaceloom_1_1autodiff.html; do
  [ -s "$work/html/$page" ] || { echo "FAILED: the reference has no $page"; exit 1; }
done
echo "API reference: $(ls "$work"/html/class*.html | wc -l) class pages, no warnings"
