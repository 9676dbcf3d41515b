#!/usr/bin/env bash
# The README opens with exactly two command lines, and .ci/run runs the second one, after
# `export LOOM_REQUIRE_INTEROP=1` (in CI an interoperability test that cannot run fails).
set -euo pipefail
root=$1
mapfile -t cmds < <(awk '/^```sh$/{f=1;next} /^```$/{if(f)exit} f' "$root/README.md")
if [ ${#cmds[@]} -ne 2 ]; then
  echo "README.md: expected exactly 2 command lines in the first sh block, got ${#cmds[@]}" >&2
  exit 1
fi
if ! grep -qxF "${cmds[1]}" "$root/.ci/run"; then
  echo ".ci/run: expected the README's second command line, got:" >&2
  cat "$root/.ci/run" >&2
  exit 1
fi
export_line=$(grep -nxF 'export LOOM_REQUIRE_INTEROP=1' "$root/.ci/run" | head -1 | cut -d: -f1 || true)
cmd_line=$(grep -nxF "${cmds[1]}" "$root/.ci/run" | head -1 | cut -d: -f1)
if [ -z "$export_line" ] || [ "$export_line" -gt "$cmd_line" ]; then
  echo ".ci/run: expected 'export LOOM_REQUIRE_INTEROP=1' before the README's second command line" >&2
  exit 1
fi
echo "README commands: ok"
