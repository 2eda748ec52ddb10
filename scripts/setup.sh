#!/usr/bin/env bash
# Set up axe on a fresh machine: a virtual environment in .venv with axe (editable), its
# pinned TVM, the local CPU build of torch and the test tools.  Idempotent and quiet.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first and pinned: an unpinned torch would pull several GB of CUDA packages.
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v "is ignored" || true
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v "is ignored" || true
.venv/bin/python -c "import axe, tvm, torch, numpy, hypothesis; print('axe setup ok: tvm', tvm.__version__, '| torch', torch.__version__)"
