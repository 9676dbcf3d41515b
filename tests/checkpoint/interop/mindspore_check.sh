#!/usr/bin/env bash
# mindspore_check.sh TOOL SCRIPT: checkpoint interoperability with MindSpore itself. Runs SCRIPT
# (mindspore_check.py) with TOOL (loom_ckpt_interop_tool) in the cached MindSpore virtual
# environment of tests/mindspore_venv.sh (SKIPPED, exit 0, when it cannot be made).
set -u
tool=$1
script=$2
source "$(dirname "$0")/../../mindspore_venv.sh"
"$venv/bin/python" "$script" "$tool"
