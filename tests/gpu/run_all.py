#!/usr/bin/env python3
"""Run every GPU check on the built artifacts (on the GPU machine; TVM is not needed there).

Loads ``.carry/artifacts/<name>/`` with ``axe.runtime.load``, runs the ``CHECKS`` of every
``tests/gpu/cases_*.py`` for which an artifact exists, and prints a short table last.  Exits 1
if any check fails, any artifact has no check, or a check has no artifact.  An artifact built for an
arch the device cannot run (an sm_100a cubin on an H100) is skipped and listed as ``SKIP`` with
both archs; skips do not fail the run.
Usage: ``python3 tests/gpu/run_all.py [--artifacts DIR] [--only NAME ...]``.
"""

import argparse
import datetime
import glob
import importlib.util
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def load_checks():
    """{artifact name: (case module name, check function)} from tests/gpu/cases_*.py (multi-GPU
    cases, ``DIST_CHECKS``, map to None: ``tests/gpu/run_dist.py`` runs them under torchrun)."""
    checks = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "gpu", "cases_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for art, fn in getattr(mod, "CHECKS", {}).items():
            checks[art] = (name, fn)
        for art in getattr(mod, "DIST_CHECKS", {}):
            checks[art] = None
    return checks


def capability_of(arch):
    """``sm_100a`` -> (10, 0), ``sm_90a`` -> (9, 0), ``sm_80`` -> (8, 0)."""
    digits = arch[3:].rstrip("af")
    return int(digits[:-1]), int(digits[-1])


def runs_on(arch, cap):
    """Whether a cubin built for ``arch`` loads on a device of compute capability ``cap``: an
    arch-specific one (``sm_90a``, ``sm_100a``: tcgen05, wgmma, setmaxnreg) only on exactly that
    capability; a plain ``sm_XY`` one on the same major version from minor Y up."""
    want = capability_of(arch)
    return tuple(cap) == want if arch.endswith(("a", "f")) else cap[0] == want[0] and cap[1] >= want[1]


def arch_of(artifacts, name):
    import json
    with open(os.path.join(artifacts, name, "launch.json")) as f:
        return json.load(f).get("arch", "sm_90a")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "artifacts"))
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)

    import torch

    import axe.runtime as rt

    assert "tvm" not in sys.modules, "run_all must not import TVM"
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    cap = tuple(torch.cuda.get_device_capability()) if torch.cuda.is_available() else (0, 0)
    print(f"{datetime.datetime.now().isoformat(timespec='seconds')}  {dev}  torch {torch.__version__}")
    checks = load_checks()
    found = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(args.artifacts, "*", "launch.json")))
    dist_only = {n for n, c in checks.items() if c is None}
    names = sorted((set(found) | set(checks)) - dist_only)
    if args.only:
        names = [n for n in names if n in args.only]
    rows = []
    for name in names:
        t = time.time()
        if name not in found:
            rows.append((name, "MISSING", "no artifact (run scripts/gpu_build.py)", 0.0))
            continue
        if name not in checks:
            rows.append((name, "NOCHECK", "artifact without a check in tests/gpu/cases_*.py", 0.0))
            continue
        arch = arch_of(args.artifacts, name)
        if not runs_on(arch, cap):
            rows.append((name, "SKIP", f"built for {arch}; this device is compute capability {cap[0]}.{cap[1]}", 0.0))
            continue
        try:
            torch.manual_seed(int(time.time() * 1e6) % 2**31)  # fresh inputs every run
            kernel = rt.load(os.path.join(args.artifacts, name))
            detail = checks[name][1](kernel, torch) or ""
            torch.cuda.synchronize()
            rows.append((name, "ok", str(detail), time.time() - t))
        except Exception as e:  # noqa: BLE001 - one failing kernel must not hide the others
            traceback.print_exc()
            rows.append((name, "FAIL", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}", time.time() - t))
        print(f"{rows[-1][0]}  {rows[-1][1]}  {rows[-1][3]:.2f}  {rows[-1][2]}", flush=True)   # progress
    assert "tvm" not in sys.modules, "a check imported TVM"
    width = max([len(r[0]) for r in rows] + [4])
    print()
    print(f"{'kernel':{width}s}  {'result':7s}  {'s':>5s}  detail")
    for name, status, detail, secs in rows:
        print(f"{name:{width}s}  {status:7s}  {secs:5.2f}  {detail}")
    bad = [r for r in rows if r[1] not in ("ok", "SKIP")]
    skipped = sum(r[1] == "SKIP" for r in rows)
    print(f"{len(rows) - len(bad) - skipped}/{len(rows) - skipped} ok on {dev}"
          + (f"; {skipped} skipped: built for an arch this device cannot run" if skipped else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
