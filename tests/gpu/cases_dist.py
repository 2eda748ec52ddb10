"""Multi-GPU checks: collectives, put/get, the fused GEMM + reduce-scatter and all-gather + GEMM, and
failure behaviour.

``BUILDS`` (CPU machine, ``scripts/gpu_build.py``) builds each kernel for world sizes 2, 4 and 8;
``DIST_CHECKS`` run on the GPU machine under torchrun (``tests/gpu/run_dist.py``), one process
per GPU, on the artifacts whose world size is the process group's.  Every check draws fresh
random data, poisons outputs with NaN, runs the kernel several times (the launch epoch advances,
no flag is reset) and compares with torch (``torch.mm`` + ``dist.reduce_scatter_tensor`` and
friends, or an fp32 reference).  Module-level imports stay TVM-free.
"""

import functools
import os

WORLDS = (2, 4, 8)
REPEATS = 3
#: (M, N, K) global problems of gemm_rs: ragged local M (1000 rows) and N, one k-block multiple
GEMM_SHAPES = {"ragged": lambda w: (w * 1000, 1000, w * 512), "square": lambda w: (w * 1024, 2048, w * 1024),
               "multi": lambda w: (w * 4096, 4096, w * 512)}     # "multi": several tiles per CTA


def _gemm_name(tag, w, dtype, b_major):
    return f"dist_gemm_rs_{tag}_{_short(dtype)}_{b_major}_w{w}"


def _kernels():
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from kernels import ag_gemm, collectives, gemm_rs
    return collectives, gemm_rs, ag_gemm


def _collective(kind, w, dtype, name):
    return _kernels()[0].build(kind, w * 264, 1000, w, dtype, name=name)


def _exchange(w, name):
    return _kernels()[0].build("exchange", 132 * 3, 264, w, "bfloat16", name=name)


def _put_signal(w, name):
    return _kernels()[0].build("put_signal", 132 * 8, 264, w, "bfloat16", features=("nvshmem",), name=name)


def _gemm_rs(shape, w, dtype, b_major, name, **kw):
    return _kernels()[1].build(*shape, w, dtype, b_major, name=name, **kw)


def _ag_gemm(shape, w, dtype, b_major, name, **kw):
    return _kernels()[2].build(*shape, w, dtype, b_major, name=name, **kw)


#: (M, N, K) global problems of ag_gemm: N/w not a tile multiple, K not a 128 multiple ("ragged");
#: several row blocks per rank and tiles per CTA ("multi"); N/w a multiple of the 256-column tile
#: for the fused gate/up projection ("silu")
AG_SHAPES = {"ragged": lambda w: (w * 128, w * 1000, 576), "multi": lambda w: (w * 1024, w * 2048, 1024),
             "silu": lambda w: (w * 256, w * 1024, 576)}
#: ag_gemm variants: (name tag, shape, dtype, B layout, make's keywords) — the SM push, the
#: copy-engine staging (push="copy_engine") and the fused gate/up projection (act="silu_mul")
AG_CASES = ([(t, t, dt, bm, {}) for t, dt, bm in (("ragged", "bfloat16", "col"), ("ragged", "float16", "row"),
                                                  ("multi", "bfloat16", "col"))]
            + [(t + "_ce", t, "bfloat16", "col", {"push": "copy_engine"}) for t in ("ragged", "multi")]
            + [("silu", "silu", "bfloat16", "col", {"act": "silu_mul"})])


def _ag_name(tag, w, dtype, b_major):
    return f"dist_ag_gemm_{tag}_{_short(dtype)}_{b_major}_w{w}"


def _short(dtype):
    return "bf16" if dtype == "bfloat16" else "f16"


#: gemm_rs variants: (name tag, shape, dtype, B layout, make's keywords) — the default forwarding
#: push, the bulk push (rs_push="bulk") on one and on several tiles per CTA, the owners adding
#: the peers' partials through registers (rs_add="registers"), and A read by the plain GEMM's 2-D
#: boxes (rs_a="rows": whole-tile owners only, so not on "ragged")
GEMM_CASES = ([(tag, tag, dt, bm, {}) for tag in GEMM_SHAPES for dt, bm in
               (("bfloat16", "col"), ("float16", "row"), ("bfloat16", "row"), ("float16", "col"))
               if not (tag in ("square", "multi") and bm == "row") and not (tag == "multi" and dt == "float16")]
              + [(t + "_bulk", t, "bfloat16", "col", {"rs_push": "bulk"}) for t in ("ragged", "multi")]
              + [(t + "_regs", t, dt, bm, {"rs_add": "registers"})
                 for t, dt, bm in (("ragged", "bfloat16", "col"), ("ragged", "float16", "row"), ("multi", "bfloat16", "col"))]
              + [(t + "_rows", t, dt, "col", {"rs_a": "rows"})
                 for t, dt in (("square", "bfloat16"), ("square", "float16"), ("multi", "bfloat16"))])

BUILDS = {}
for _w in WORLDS:
    for _kind in ("reduce_scatter", "all_reduce", "all_gather"):
        for _dt in ("bfloat16", "float16"):
            _n = f"dist_{_kind}_{_short(_dt)}_w{_w}"
            BUILDS[_n] = functools.partial(_collective, _kind, _w, _dt, _n)
    BUILDS[f"dist_exchange_w{_w}"] = functools.partial(_exchange, _w, f"dist_exchange_w{_w}")
    BUILDS[f"dist_put_signal_w{_w}"] = functools.partial(_put_signal, _w, f"dist_put_signal_w{_w}")
    for _tag, _shape, _dt, _bm, _kw in GEMM_CASES:
        _n = _gemm_name(_tag, _w, _dt, _bm)
        BUILDS[_n] = functools.partial(_gemm_rs, GEMM_SHAPES[_shape](_w), _w, _dt, _bm, _n, **_kw)
    for _tag, _shape, _dt, _bm, _kw in AG_CASES:
        _n = _ag_name(_tag, _w, _dt, _bm)
        BUILDS[_n] = functools.partial(_ag_gemm, AG_SHAPES[_shape](_w), _w, _dt, _bm, _n, **_kw)


# --- checks (GPU machine, torchrun) -------------------------------------------------------------

def _rel(out, ref):
    import torch
    if not torch.isfinite(out).all():
        bad = (~torch.isfinite(out)).nonzero()[:4].tolist()
        raise AssertionError(f"non-finite output at {bad} (unwritten elements?)")
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-6))


def _gather_all(x, dist):
    import torch
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x)
    return parts


def check_collective(kind, dtype):
    def check(path, heap, torch, dist):
        from axe.runtime.distributed import DistKernel
        k = DistKernel(path, heap, timeout=10.0)
        w, r = heap.world, heap.rank
        args = {a["name"]: a for a in k.launch["args"]}
        xs, ys = tuple(args["X_"]["shape"]), tuple(args["Y_"]["shape"])
        dt = getattr(torch, dtype)
        X = heap.empty(xs, dt)
        errs = []
        for _ in range(REPEATS):
            X.local.copy_(torch.randn(xs, device=heap.device, dtype=torch.float32).to(dt))
            Y = torch.full(ys, float("nan"), device=heap.device, dtype=dt)
            dist.barrier()      # every rank's X is written before any kernel reads it (stream order + barrier)
            k(X, Y, check=True)
            if kind == "all_gather":
                ref = torch.cat(_gather_all(X.local.contiguous(), dist))
            else:
                total = torch.stack(_gather_all(X.local.float().contiguous(), dist)).sum(0)
                ref = total if kind == "all_reduce" else total.chunk(w)[r]
            errs.append(_rel(Y, ref))
        tol = 0 if kind == "all_gather" else 1e-2
        if max(errs) > tol:
            raise AssertionError(f"{kind}: rel. error {max(errs):.3g} > {tol} (runs {errs})")
        return f"{kind} {list(xs)}→{list(ys)} {dtype}, {REPEATS} launches, max rel err {max(errs):.2e}"
    return check


def check_exchange(path, heap, torch, dist):
    from axe.runtime.distributed import DistKernel
    k = DistKernel(path, heap, timeout=10.0)
    w, r = heap.world, heap.rank
    shape = tuple(k.launch["args"][0]["shape"])
    Y = heap.empty(shape, torch.bfloat16)
    for _ in range(REPEATS):
        X = torch.randn(shape, device=heap.device).to(torch.bfloat16)
        Z = torch.full(shape, float("nan"), device=heap.device, dtype=torch.bfloat16)
        Y.local.fill_(float("nan"))
        dist.barrier()
        k(X, Y, Z, check=True)
        xs = _gather_all(X, dist)
        if not torch.equal(Y.local, xs[(r - 1) % w]):
            raise AssertionError("put: Y does not hold the left neighbour's X")
        if not torch.equal(Z, xs[(r - 2) % w]):
            raise AssertionError("get: Z does not hold the left neighbour's Y")
    return f"put to rank {(r + 1) % w} and get from rank {(r - 1) % w}, {list(shape)} bf16, {REPEATS} launches, exact"


def check_put_signal(path, heap, torch, dist):
    """NVSHMEM put-with-signal (a cubin linked with NVSHMEM's device library, its module set up by
    nvshmemx_cumodule_init): each rank's Y holds its left neighbour's X and every signal the launch
    count.  On a heap that is not NVSHMEM's the kernel must be refused before launch."""
    from axe.runtime.distributed import DistKernel, DistributedSignatureError
    if heap.backend != "nvshmem":
        try:
            DistKernel(path, heap, timeout=10.0)
        except DistributedSignatureError as e:
            return f"refused on a {heap.backend} heap, as it must be: {str(e)[:100]}"
        raise AssertionError("an NVSHMEM kernel was accepted on a heap without NVSHMEM")
    k = DistKernel(path, heap, timeout=10.0)
    w, r = heap.world, heap.rank
    shape = tuple(k.launch["args"][0]["shape"])
    Y = heap.empty(shape, torch.bfloat16)
    S = heap.zeros((tuple(k.launch["args"][2]["shape"])[0],), torch.uint64)
    for i in range(REPEATS):
        X = torch.randn(shape, device=heap.device).to(torch.bfloat16)
        Y.local.fill_(float("nan"))
        torch.cuda.synchronize()
        dist.barrier()
        k(X, Y, S, check=True)
        heap.barrier()
        xs = _gather_all(X, dist)
        if not torch.equal(Y.local, xs[(r - 1) % w]):
            raise AssertionError(f"launch {i + 1}: Y does not hold the left neighbour's X")
        got = sorted(set(S.local.tolist()))
        if got != [i + 1]:
            raise AssertionError(f"launch {i + 1}: signals are {got}, expected the epoch {i + 1}")
    return (f"NVSHMEM put-with-signal to rank {(r + 1) % w}, {list(shape)} bf16, {REPEATS} launches: Y exact, "
            "every signal = the launch's epoch")


def _against_torch(op, torch_name, launch, what):
    """``launch()`` ``REPEATS`` times — each returns ``(axe's output, torch's, the fp32 reference)`` —
    and hold axe's worst relative error to ``max(3 × torch's, 2e-2)``; the detail line on success."""
    errs, errs_torch = [], []
    for _ in range(REPEATS):
        got, theirs, ref = launch()
        errs.append(_rel(got, ref))
        errs_torch.append(_rel(theirs, ref))
    tol = max(3 * max(errs_torch), 2e-2)
    if max(errs) > tol:
        raise AssertionError(f"{op}: rel. error {max(errs):.3g} > {tol:.3g} ({torch_name}: {max(errs_torch):.3g})")
    return f"{what}, {REPEATS} launches: rel err {max(errs):.2e} ({torch_name} {max(errs_torch):.2e})"


def _weight(torch, rows, cols, dt, b_major, device):
    """A weight shard ``W`` (rows × cols, as ``nn.Linear`` stores it) and the kernel's B of it."""
    Bn = (torch.randn(rows, cols, device=device) * 0.5).to(dt)
    return Bn, (Bn if b_major == "col" else Bn.t().contiguous())


def check_gemm_rs(dtype, b_major):
    def check(path, heap, torch, dist):
        from axe.runtime.distributed import DistKernel
        k = DistKernel(path, heap, timeout=10.0)
        w, r = heap.world, heap.rank
        d = k.dist["params"]
        M, K = d["A_"]["shape"]
        N = d["C_"]["shape"][1]
        dt = getattr(torch, dtype)

        def launch():
            A = (torch.randn(M, K // w, device=heap.device) * 0.5).to(dt)
            Bn, B = _weight(torch, N, K // w, dt, b_major, heap.device)         # W_r: N × K/w
            Y = torch.full((M // w, N), float("nan"), device=heap.device, dtype=dt)
            k(A, B, Y, check=True)
            part = A.float() @ Bn.float().t()
            dist.all_reduce(part)
            mine = torch.empty(M // w, N, device=heap.device, dtype=dt)
            dist.reduce_scatter_tensor(mine, (A @ Bn.t()).contiguous())
            return Y, mine, part.chunk(w)[r]
        return _against_torch("gemm_rs", "torch.mm + reduce_scatter", launch, f"{M}x{N}x{K} {dtype} B {b_major}")
    return check


def check_ag_gemm(dtype, b_major):
    def check(path, heap, torch, dist):
        """Every rank's C = all_gather(A) · B_rᵀ against torch (NCCL all-gather + torch.mm) and fp32,
        over several launches (the gathered buffer's two halves alternate)."""
        from axe.runtime.distributed import DistKernel
        k = DistKernel(path, heap, timeout=10.0)
        w = heap.world
        d = k.dist["params"]
        M, K = d["A_"]["shape"]
        N = d["C_"]["shape"][1]
        dt = getattr(torch, dtype)

        def launch():
            A = (torch.randn(M // w, K, device=heap.device) * 0.5).to(dt)
            Bn, B = _weight(torch, N // w, K, dt, b_major, heap.device)         # W_r: N/w × K
            C = torch.full((M, N // w), float("nan"), device=heap.device, dtype=dt)
            k(A, B, C, check=True)
            full = torch.empty(M, K, device=heap.device, dtype=dt)
            dist.all_gather_into_tensor(full, A)
            return C, full @ Bn.t(), full.float() @ Bn.float().t()
        return _against_torch("ag_gemm", "all_gather + torch.mm", launch, f"{M}x{N}x{K} {dtype} B {b_major}")
    return check


def check_ag_gemm_silu(path, heap, torch, dist):
    """The fused gate/up projection: C_r = silu(gate)·up of all_gather(A) against the unfused fp32
    MLP activation, B_r's rows interleaved by tile (kernels.tp_shapes.interleave)."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    import torch.nn.functional as F
    from axe.runtime.distributed import DistKernel
    from kernels.tp_shapes import interleave
    k = DistKernel(path, heap, timeout=10.0)
    w = heap.world
    d = k.dist["params"]
    M, K = d["A_"]["shape"]
    n = d["C_"]["local_shape"][1]                  # this rank's SiLU·up columns
    errs = []
    for _ in range(REPEATS):
        A = (torch.randn(M // w, K, device=heap.device) * 0.5).to(torch.bfloat16)
        gate = (torch.randn(n, K, device=heap.device) * K ** -0.5).to(torch.bfloat16)
        up = (torch.randn(n, K, device=heap.device) * K ** -0.5).to(torch.bfloat16)
        C = torch.full((M, n), float("nan"), device=heap.device, dtype=torch.bfloat16)
        k(A, interleave(gate, up).contiguous(), C, check=True)
        full = torch.empty(M, K, device=heap.device, dtype=torch.bfloat16)
        dist.all_gather_into_tensor(full, A)
        ref = F.silu(full.float() @ gate.float().t()) * (full.float() @ up.float().t())
        errs.append(_rel(C, ref))
    if max(errs) > 2e-2:
        raise AssertionError(f"ag_gemm silu_mul: rel. error {max(errs):.3g} > 2e-2")
    return f"{M}x{2 * n}x{K} SiLU·up, {REPEATS} launches: rel err {max(errs):.2e}"


def check_gemm_rs_signature(path, heap, torch, dist):
    """DTensor arguments are accepted; a wrong placement and a wrong local shape are refused
    before launch, naming the parameter."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    from axe.runtime.distributed import DistKernel, DistributedSignatureError
    k = DistKernel(path, heap, timeout=10.0)
    w, r = heap.world, heap.rank
    d = k.dist["params"]
    M, K = d["A_"]["shape"]
    N = d["C_"]["shape"][1]
    mesh = init_device_mesh("cuda", (w,), mesh_dim_names=("gpus",))
    A = torch.randn(M, K // w, device=heap.device).to(torch.bfloat16)
    B = torch.randn(N, K // w, device=heap.device).to(torch.bfloat16)
    Y = torch.full((M // w, N), float("nan"), device=heap.device, dtype=torch.bfloat16)
    dA, dB, dY = (DTensor.from_local(t, mesh, [Shard(p)]) for t, p in ((A, 1), (B, 1), (Y, 0)))
    k(dA, dB, dY, check=True)
    part = A.float() @ B.float().t()
    dist.all_reduce(part)
    err = _rel(Y, part.chunk(w)[r])
    if err > 2e-2:
        raise AssertionError(f"DTensor launch: rel. error {err:.3g}")
    msgs = []
    for bad, want in ((lambda: k(DTensor.from_local(A, mesh, [Shard(0)]), dB, dY), "A_"),
                      (lambda: k(A[:, :-8].contiguous(), B, Y), "A_")):
        try:
            bad()
        except DistributedSignatureError as e:
            if want not in str(e):
                raise AssertionError(f"error does not name {want}: {e}") from None
            msgs.append(str(e).splitlines()[0][:90])
        else:
            raise AssertionError("a wrong argument was launched")
    return f"DTensor args ok (err {err:.1e}); refused: {' | '.join(msgs)}"


def check_timeout(path, heap, torch, dist):
    """Rank 0 launches, the others do not: rank 0 must raise PeerTimeoutError naming the rank it
    waits for first — its left neighbour, rank w − 1 — within the timeout, never hang."""
    import time

    from axe.runtime.distributed import DistKernel, PeerTimeoutError
    k = DistKernel(path, heap, timeout=2.0)
    shape = tuple(k.launch["args"][0]["shape"])
    Y = heap.empty(shape, torch.bfloat16)
    X = torch.zeros(shape, device=heap.device, dtype=torch.bfloat16)
    Z = torch.zeros_like(X)
    dist.barrier()
    detail = "did not launch (the missing peer)"
    if heap.rank == 0:
        t = time.time()
        try:
            k(X, Y, Z, check=True)
        except PeerTimeoutError as e:
            took = time.time() - t
            if f"rank {heap.world - 1} did not arrive" not in str(e) or took > 10:
                raise AssertionError(f"timeout report after {took:.1f} s: {e}") from None
            detail = f"PeerTimeoutError after {took:.1f} s: {str(e)[:150]}"
        else:
            raise AssertionError("the launch without its peers did not time out")
    dist.barrier()
    return detail


def check_world(path, heap, torch, dist):
    """A kernel built for another world size is refused before launch."""
    from axe.runtime.distributed import DistKernel, DistributedSignatureError
    try:
        DistKernel(path, heap)
    except DistributedSignatureError as e:
        return f"refused: {str(e)[:120]}"
    raise AssertionError("a kernel built for another world size was accepted")


DIST_CHECKS = {}
for _w in WORLDS:
    for _kind in ("reduce_scatter", "all_reduce", "all_gather"):
        for _dt in ("bfloat16", "float16"):
            DIST_CHECKS[f"dist_{_kind}_{_short(_dt)}_w{_w}"] = check_collective(_kind, _dt)
    DIST_CHECKS[f"dist_exchange_w{_w}"] = check_exchange
    DIST_CHECKS[f"dist_put_signal_w{_w}"] = check_put_signal
    for _tag, _shape, _dt, _bm, _kw in GEMM_CASES:
        DIST_CHECKS[_gemm_name(_tag, _w, _dt, _bm)] = check_gemm_rs(_dt, _bm)
    for _tag, _shape, _dt, _bm, _kw in AG_CASES:
        DIST_CHECKS[_ag_name(_tag, _w, _dt, _bm)] = check_ag_gemm_silu if "act" in _kw else check_ag_gemm(_dt, _bm)
#: checks that reuse another case's artifact: (artifact, check); run after the correctness checks
EXTRA = [("dist_gemm_rs_square_bf16_col_w{w}", check_gemm_rs_signature), ("dist_exchange_w{w}", check_timeout),
         ("dist_exchange_w{other}", check_world)]
