"""``axe demo``: the README's main job.

1. the layout algebra on the specification's worked examples;
2. every kernel in ``kernels/`` built for every CUDA target (sm_90a, sm_100a), with what each
   operator chose and the instructions the PTX holds; artifacts under ``build/demo/``;
3. the Trainium kernels (``kernels/nki_*.py``) built to NKI source and run on axe's NumPy model of
   NKI against numpy, with the cost model's estimates;
4. what can run here: CUDA kernels run only where a CUDA GPU is present (``tests/gpu`` runs them
   on one); on a CPU machine the demo says so.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

TARGETS = ("sm_90a", "sm_100a")
ROOT = Path(__file__).resolve().parent.parent
#: instructions worth pointing out in a kernel's PTX
WATCH = ("cp.async.bulk.tensor", "cp.async.cg", "cp.async.ca", "mbarrier", "ldmatrix", "stmatrix",
         "ld.global.v4", "st.global.v4", "ld.shared.v4", "st.shared.v4", "shfl.sync", "wgmma", "tcgen05")


def _layouts() -> None:
    from axe.layout import R, S, canonicalize, lane, reg, slice, tile, tile_of, warp
    from axe.layout.cli import explain
    print("== 1. layouts ==")
    tc = S[(8, 2, 4, 2):(4 @ lane, 1 @ warp, 1 @ lane, 1 @ reg)] + R[2:4 @ warp] + 5 @ warp
    print(explain(tc, (8, 16), count=4))
    A, B = S[(2, 3):(3, 1)], S[(8, 8):(8, 1)]
    T = tile(A, (2, 3), B, (8, 8))
    print(f"\ntile   {A} ⊗ {B} = {T}")
    print(f"slice  {T} over (16,24), [0:8)×[8:24) = {canonicalize(slice(T, (16, 24), [(0, 8), (8, 24)]))}")
    print(f"tileof {T} / {B} = {tile_of(T, (16, 24), B, (8, 8))}")


def _kernels() -> None:
    from axe.lang.cli import load_kernels
    from axe.lang.kernel import KernelError, compile_kernel, explain
    from axe.lang.targets import TargetError
    from axe.schedules.dispatch import DispatchError
    print("\n== 2. kernels, built for", ", ".join(TARGETS), "==")
    have_nvcc = shutil.which("nvcc") is not None
    if not have_nvcc:
        print("nvcc not found: showing dispatch only, no cubin")
    out_root = ROOT / "build" / "demo"
    for path in sorted((ROOT / "kernels").glob("*.py")):
        if path.name.startswith("_"):
            continue
        for name, k in load_kernels(str(path), required=False).items():   # helper modules define none
            if k.meta.get("targets") and TARGETS[0] not in k.meta["targets"]:
                continue                  # a kernel for other targets only (section 3: Trainium)
            print(f"\n-- {path.relative_to(ROOT)}::{name}")
            print(explain(k, TARGETS[0]))
            for target in TARGETS:
                if not have_nvcc:
                    continue
                t0 = time.perf_counter()
                try:
                    art = compile_kernel(k, target)
                except KernelError as err:        # e.g. wgmma exists on sm_90a only
                    if not isinstance(err, (DispatchError, TargetError)):   # a bug, not a target's limit
                        raise
                    reason = err.message.splitlines()
                    where = f" (at {err.file}:{err.line})" if err.line else ""
                    print(f"   {target}: not built{where}: "
                          + " ".join(next((l for l in reason if "declined" in l), reason[0]).split()))
                    continue
                art.save(str(out_root / target / name))
                found = [w for w in WATCH if w in art.ptx]
                regs = re.search(r"Used (\d+) registers", getattr(art, "log", "") or "")
                print(f"   {target}: built in {time.perf_counter() - t0:.1f}s -> "
                      f"build/demo/{target}/{name}; PTX holds {', '.join(found) or '-'}"
                      + (f"; {regs.group(1)} registers" if regs else ""))


def _run() -> None:
    print("\n== 4. running ==")
    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        print("no CUDA GPU here: the kernels above are checked against torch on an H100/H200 by "
              "tests/gpu/run_all.py (docs/gpu.md); the layout algebra ran above.")
        return
    os.system(f"python3 {ROOT / 'tests' / 'gpu' / 'run_all.py'}")


def _trainium() -> None:
    """Section 3: the trn1 kernels built to NKI source and run on axe's NumPy model of NKI."""
    print("\n== 3. Trainium (trn1): NKI source run on axe's NumPy model of NKI ==")
    from axe.demo_trainium import run_demo
    run_demo(ROOT / "build" / "demo" / "trn1")


def main(args=None) -> int:
    """Run the demo; returns the exit status."""
    _layouts()
    _kernels()
    _trainium()
    _run()
    return 0


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("demo", help="the main job: layouts, kernels built for every target, what ran")
    p.set_defaults(func=main)
