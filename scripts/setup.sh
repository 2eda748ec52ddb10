#!/usr/bin/env bash
# Set up axe on a fresh machine: a virtual environment in .venv with axe (editable), its
# pinned TVM (the `tvm` extra), the local CPU build of torch and the test tools.  Idempotent; one line per step,
# pip's whole log only when an install fails (then the script fails too).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
step() { echo "axe setup: $*" >&2; }
pip_install() {
    local log
    log=$(mktemp)
    if ! .venv/bin/python -m pip install --disable-pip-version-check "$@" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "axe setup: FAILED: pip install $*" >&2
        exit 1
    fi
    rm -f "$log"
}
step "[1/4] virtual environment .venv"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first and pinned: an unpinned torch would pull several GB of CUDA packages.
step "[2/4] torch==2.13.0 (the CPU build, pinned before anything can ask for another)"
pip_install "torch==2.13.0"
step "[3/4] axe (editable) with apache-tvm, numpy, matplotlib, pytest, pytest-xdist, hypothesis, pdoc"
pip_install -e ".[tvm,test]"
step "[4/4] checking the imports"
.venv/bin/python -c "import axe, tvm, torch, numpy, hypothesis, pdoc, xdist; print('axe setup ok: tvm', tvm.__version__, '| torch', torch.__version__)"
