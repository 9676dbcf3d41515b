# Sourced by the MindSpore interoperability tests (tests/checkpoint/interop/mindspore_check.sh,
# tests/mindir/mindspore_check.sh): makes sure $venv holds MindSpore, creating it once and caching
# it in ${LOOM_MS_VENV:-$HOME/.cache/loom/venv-ms} (about 2.8 GB) through tests/python_venv.sh
# (skipped with exit 77 when it cannot be made; failed under LOOM_REQUIRE_INTEROP=1).
# $LOOM_MS_SPEC overrides the pip requirement (default mindspore==2.10.0, the version verified;
# numpy<2 because numpy 2 breaks MindSpore 2.10's C extension).
venv=${LOOM_MS_VENV:-${HOME:-/tmp}/.cache/loom/venv-ms}
venv_spec=("${LOOM_MS_SPEC:-mindspore==2.10.0}" 'numpy<2')
venv_check="import mindspore, numpy"
export GLOG_v=3  # MindSpore's own log: errors only
source "$(dirname "${BASH_SOURCE[0]}")/python_venv.sh"
