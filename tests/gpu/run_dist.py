#!/usr/bin/env python3
"""Run the multi-GPU checks under torchrun, one process per GPU (TVM is not needed there).

``torchrun --nproc-per-node W tests/gpu/run_dist.py [--artifacts DIR] [--only NAME ...]`` runs
every ``DIST_CHECKS`` entry of ``tests/gpu/cases_*.py`` whose artifact was built for world size
W (``launch["distributed"]["world"]``), then the ``EXTRA`` checks (DTensor signature, a peer
that never launches, a kernel built for another world size).  Rank 0 prints a table last; the
exit code is 1 if any check failed on any rank.  NVLink multicast stays off: the three variables
that switch it off are set here if the environment lacks them, and never unset.
"""

import argparse
import datetime
import glob
import importlib.util
import json
import os
import sys
import time
import traceback

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def load_cases():
    """(DIST_CHECKS merged, EXTRA lists) of tests/gpu/cases_*.py."""
    checks, extra = {}, []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "gpu", "cases_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        checks.update(getattr(mod, "DIST_CHECKS", {}))
        extra.extend(getattr(mod, "EXTRA", []))
    return checks, extra


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "artifacts"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--backend", default="auto", help="symmetric memory: nvshmem, torch or auto")
    args = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120), device_id=torch.device("cuda", local))
    from axe.runtime.symmetric import SymmetricHeap
    heap = SymmetricHeap(backend=args.backend)
    w, r = heap.world, heap.rank
    assert "tvm" not in sys.modules, "run_dist must not import TVM"
    checks, extra = load_cases()
    worlds = {}
    for p in glob.glob(os.path.join(args.artifacts, "*", "launch.json")):
        with open(p) as f:
            worlds[os.path.basename(os.path.dirname(p))] = json.load(f).get("distributed", {}).get("world")
    todo = [(n, n, fn) for n, fn in sorted(checks.items()) if worlds.get(n) == w]
    others = sorted({v for v in worlds.values() if v and v != w})
    for pattern, fn in extra:
        name = pattern.format(w=w, other=others[0] if others else w + 2)
        todo.append((f"{fn.__name__}:{name}", name, fn))
    if args.only:
        todo = [t for t in todo if t[0] in args.only or t[1] in args.only]
    missing = sorted(n for n in checks if n.endswith(f"_w{w}") and n not in worlds)
    if r == 0:
        print(f"{datetime.datetime.now().isoformat(timespec='seconds')}  {w} x {torch.cuda.get_device_name()}  "
              f"torch {torch.__version__}  symmetric memory: {heap.backend}"
              + (f" ({heap.fallback_reason})" if getattr(heap, "fallback_reason", None) else ""), flush=True)
    rows = []
    for label, name, fn in todo:
        t = time.time()
        path = os.path.join(args.artifacts, name)
        if name not in worlds:
            rows.append((label, "MISSING", "no artifact (run scripts/gpu_build.py)", 0.0))
            continue
        try:
            torch.manual_seed(int(time.time() * 1e6) % 2**31 + r)
            detail = fn(path, heap, torch, dist) or ""
            torch.cuda.synchronize()
            rows.append((label, "ok", str(detail), time.time() - t))
        except Exception as e:  # noqa: BLE001 - one failing check must not hide the others
            traceback.print_exc()
            rows.append((label, "FAIL", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}", time.time() - t))
        try:
            dist.barrier()
        except Exception:  # noqa: BLE001
            rows.append((label, "FAIL", "ranks out of step after this check", 0.0))
            break
        if r == 0:
            print(f"  {label}: {rows[-1][1]} ({rows[-1][3]:.1f} s)", flush=True)
    everyone = [None] * w
    dist.all_gather_object(everyone, rows)
    bad = 0
    if r == 0:
        width = max([len(x[0]) for x in rows] + [5])
        print(f"\n{'check':{width}s}  {'rank':4s}  {'result':7s}  {'s':>5s}  detail")
        for rank, rr in enumerate(everyone):
            for label, status, detail, secs in rr:
                print(f"{label:{width}s}  {rank:4d}  {status:7s}  {secs:5.1f}  {detail}")
                bad += status != "ok"
        total = sum(len(rr) for rr in everyone)
        print(f"{total - bad}/{total} ok on {w} x {torch.cuda.get_device_name()}"
              + (f"; not built: {missing}" if missing else ""))
    flag = torch.tensor([bad], device="cuda")
    dist.broadcast(flag, 0)
    heap.close()
    dist.destroy_process_group()
    return 1 if int(flag.item()) else 0


if __name__ == "__main__":
    sys.exit(main())
