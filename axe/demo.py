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
import shutil
import time
from pathlib import Path

TARGETS = ("sm_90a", "sm_100a")
ROOT = Path(__file__).resolve().parent.parent
#: instructions worth pointing out in a kernel's PTX
WATCH = ("cp.async.bulk.tensor", "cp.async.cg", "cp.async.ca", "mbarrier", "ldmatrix", "stmatrix",
         "ld.global.v4", "st.global.v4", "ld.shared.v4", "st.shared.v4", "shfl.sync", "wgmma", "tcgen05")
#: the short story's names of the instructions that say what a kernel is made of
SHORT = {"wgmma": "wgmma", "tcgen05": "tcgen05", "cp.async.bulk.tensor": "TMA", "cp.async.cg": "cp.async",
         "ldmatrix": "ldmatrix", "stmatrix": "stmatrix", "ld.global.v4": "16-byte loads"}


def _layouts(verbose=False) -> None:
    from axe.layout import R, S, canonicalize, lane, reg, slice, tile, tile_of, warp
    from axe.layout.cli import explain
    print("== 1. layouts ==")
    tc = S[(8, 2, 4, 2):(4 @ lane, 1 @ warp, 1 @ lane, 1 @ reg)] + R[2:4 @ warp] + 5 @ warp
    print(explain(tc, (8, 16), count=4 if verbose else 2))
    A, B = S[(2, 3):(3, 1)], S[(8, 8):(8, 1)]
    T = tile(A, (2, 3), B, (8, 8))
    print(f"\ntile   {A} ⊗ {B} = {T}")
    print(f"slice  {T} over (16,24), [0:8)×[8:24) = {canonicalize(slice(T, (16, 24), [(0, 8), (8, 24)]))}")
    print(f"tileof {T} / {B} = {tile_of(T, (16, 24), B, (8, 8))}")


def _chosen(records) -> str:
    """The schedules a build chose, in call order, each once: ``copy→tma, copy→ldmatrix, …``."""
    seen = []
    for r in records:
        item = f"{r.call.op}→{r.chosen}"
        if r.chosen and item not in seen:
            seen.append(item)
    return ", ".join(seen)


def _limitation(err) -> str:
    """A target's refusal as the limitation it is (one line, the first line that says why)."""
    lines = err.message.splitlines()
    why = next((l for l in lines if "declined" in l), lines[0])
    return " ".join(why.split()).lstrip("- ")


def _kernels(verbose=False, only=None) -> None:
    """Each kernel of ``kernels/`` built for every CUDA target: one line per target (what it chose,
    where the artifact went, the PTX instructions worth noting) or, where the target lacks what the
    kernel uses, the limitation; ``verbose``: every operator call's candidates first."""
    from axe.lang.cli import load_kernels
    from axe.lang.kernel import KernelError, compile_kernel, explain
    from axe.lang.targets import TargetError
    from axe.schedules.dispatch import DispatchError
    print("\n== 2. kernels, built for", ", ".join(TARGETS), "into build/demo/<target>/<kernel> ==")
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
            if only and name != only:
                continue
            lines = [f"-- {path.relative_to(ROOT)}::{name}"]
            if verbose or not have_nvcc:
                print(lines.pop())
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
                    lines.append(f"   {target}: not built, as expected: {_limitation(err)}" if verbose else
                                 f"{target} not built, as expected: {_limitation(err)}")
                    continue
                art.save(str(out_root / target / name))
                found = [w for w in WATCH if w in art.ptx]
                if verbose:
                    lines.append(f"   {target}: built in {time.perf_counter() - t0:.1f}s -> build/demo/{target}/{name}; "
                                 f"chose {_chosen(art.records)}; PTX holds {', '.join(found) or '-'}")
                else:
                    lines.append(f"{target} built ({', '.join(SHORT[w] for w in SHORT if w in found) or '-'})")
            print("\n".join(lines) if verbose else f"{lines[0]}: " + "; ".join(lines[1:]))


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


def _trainium(verbose=False) -> None:
    """Section 3: the trn1 kernels built to NKI source and run on axe's NumPy model of NKI."""
    print("\n== 3. Trainium (trn1): NKI source run on axe's NumPy model of NKI ==")
    from axe.demo_trainium import run_demo
    run_demo(ROOT / "build" / "demo" / "trn1", verbose=verbose)


def main(args=None) -> int:
    """Run the demo (``--verbose``: every operator call's candidates too); returns the exit status."""
    verbose = bool(getattr(args, "verbose", False))
    _layouts(verbose)
    _kernels(verbose)
    _trainium(verbose)
    _run()
    return 0


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("demo", help="the main job: layouts, kernels built for every target, what ran")
    p.add_argument("--verbose", action="store_true", help="also every operator call's schedule candidates")
    p.set_defaults(func=main)
