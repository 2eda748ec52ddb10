"""GPU cases for the runtime's own kernels: how to build each artifact, and how to check it.

Every ``tests/gpu/cases_*.py`` exposes ``BUILDS`` ({artifact name: () -> Artifact}, run by
``scripts/gpu_build.py`` on the CPU machine; TVM is imported inside the builders only) and
``CHECKS`` ({artifact name: (kernel, torch) -> detail string}, run by ``tests/gpu/run_all.py``
on the GPU machine without TVM; a check raises AssertionError on a wrong result).  Each check
draws fresh random inputs and poisons the outputs (NaN) before every launch.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _kernels():
    sys.path.insert(0, HERE)
    import _kernels_runtime

    return _kernels_runtime


def _build(fn_name, **kw):
    def builder():
        from axe.backends.cuda.build import build

        k = _kernels()
        return build(getattr(k, fn_name), "sm_90a", name=fn_name, **kw)

    return builder


def _tma_build(fn_name, specs_name):
    def builder():
        from axe.backends.cuda.build import build

        k = _kernels()
        return build(getattr(k, fn_name), "sm_90a", name=fn_name, tensormaps=getattr(k, specs_name))

    return builder


BUILDS = {
    "vcopy": _build("vcopy"),
    "tma_copy": _tma_build("tma_copy", "TMA_SPECS"),
    "tma_swizzle": _tma_build("tma_swizzle", "TMA_SWIZZLE_SPECS"),
    "axpy": _build("axpy"),
    "cluster_rank": _build("cluster_rank"),
}


def _streams_build():
    """A stream-K GEMM (runtime-supplied fp32 partials and flags) on 8 CTAs, so that two launches
    fit on the GPU at once: 640x1000x1000 fp16 is 20 tiles of 16 k-blocks split over 8 CTAs."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
    from kernels import gemm

    return gemm.build(640, 1000, 1000, dtype="float16", b_major="row", name="streams_sk", sms=8, stream_k=True)


BUILDS["streams_sk"] = _streams_build


def _timeout_build(kernel_name):
    """A kernel of ``_kernels_timeout`` whose bounded wait times out (50 ms) and traps."""
    def builder():
        import axe.lang as Ax

        sys.path.insert(0, HERE)
        import _kernels_timeout

        return Ax.compile_kernel(getattr(_kernels_timeout, kernel_name), "sm_90a")

    return builder


BUILDS["cluster_wait_timeout"] = _timeout_build("cluster_wait_timeout")
BUILDS["flag_wait_timeout"] = _timeout_build("flag_wait_timeout")

# run in a child process: the trap ends the CUDA context, and the checks after this one need theirs
_TIMEOUT_CHILD = r"""
import sys, time
import torch
from axe.runtime import load
from axe.runtime.launcher import WaitTimeoutError, synchronize
k = load(sys.argv[1])
arg = torch.zeros(k.launch["args"][0]["shape"], dtype=torch.int32, device="cuda")
torch.cuda.synchronize()
t = time.perf_counter()
k(arg)
try:
    synchronize()
except WaitTimeoutError as e:
    print(f"after {time.perf_counter() - t:.3f} s: {e}")
    try:
        k(arg)          # the context is lost: a later launch fails with the same report
        synchronize()
    except WaitTimeoutError as again:
        print("again:", again)
    sys.exit(0)
print("no error: the wait did not time out")
sys.exit(1)
"""


def _run_timeout_child(kernel):
    """Launch ``kernel`` in a child process; return its output (the report, twice)."""
    import subprocess
    import tempfile

    path = kernel.artifact.path or kernel.artifact.save(tempfile.mkdtemp(prefix="axe_timeout_"))
    root = os.path.dirname(os.path.dirname(HERE))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _TIMEOUT_CHILD, path], capture_output=True, text=True, timeout=120,
                          cwd=root, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{kernel.launch['name']}: the child exited {proc.returncode}: {out[-2000:]}"
    return out


def _check_timeout_report(kernel, words):
    """The launch ends within a second of the 50 ms timeout, and WaitTimeoutError states the
    report (``words``) after the synchronize and again at the next launch."""
    out = _run_timeout_child(kernel)
    first = next(line for line in out.splitlines() if line.startswith("after "))
    missing = [w for w in words if w not in first]
    assert not missing, f"the report lacks {missing}: {first}"
    assert float(first.split()[1]) < 5.0, f"the wait took too long to end: {first}"
    again = next((line for line in out.splitlines() if line.startswith("again: ")), "")
    assert all(w in again for w in words), f"a later launch did not repeat the report: {out[-1000:]}"
    return first[:200]


def check_cluster_wait_timeout(kernel, torch):
    return _check_timeout_report(kernel, ["cluster_wait_timeout on cuda:", "CTA 1 (cluster rank 1)", "waited 50 ms",
                                          "phase 0 of mbarrier 'never_arrives' stage 0", "another CTA of its cluster",
                                          "trap"])


def check_flag_wait_timeout(kernel, torch):
    return _check_timeout_report(kernel, ["flag_wait_timeout on cuda:", "CTA 1 (cluster rank 0) thread 0 waited 50 ms",
                                          "flag 'F_'[1] to become 1 (it read 0)", "co-resident"])


def expect_error(exc_type, fn, *words):
    """Run ``fn``; it must raise ``exc_type`` whose message holds every word in ``words``."""
    try:
        fn()
    except exc_type as e:
        msg = str(e)
        missing = [w for w in words if w not in msg]
        assert not missing, f"error message lacks {missing}: {msg}"
        return msg
    raise AssertionError(f"expected {exc_type.__name__} mentioning {words}, nothing raised")


def _poisoned(torch, like):
    return torch.full_like(like, float("nan"))


def check_vcopy(kernel, torch):
    from axe.runtime import LaunchError

    n = 256 * 1024
    for _ in range(3):
        a = torch.randn(n, device="cuda")
        b = _poisoned(torch, a)
        kernel(a, b)
        torch.cuda.synchronize()
        assert torch.equal(a, b), f"vcopy: {(a != b).sum().item()} of {n} elements differ"
    # the argument checks, on real CUDA tensors
    big = torch.randn(n + 4, device="cuda")
    expect_error(LaunchError, lambda: kernel(big[1 : n + 1], b), "'A'", "aligned")
    expect_error(LaunchError, lambda: kernel(a.half(), b), "'A'", "dtype float16")
    expect_error(LaunchError, lambda: kernel(a[: n - 4], b), "'A'", "shape")
    expect_error(LaunchError, lambda: kernel(torch.randn(2 * n, device="cuda")[::2], b), "'A'", "strides")
    expect_error(LaunchError, lambda: kernel(a.cpu(), b), "'A'", "device")
    import time

    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(200):
        kernel(a, b)
    host_us = (time.perf_counter() - t) / 200 * 1e6
    torch.cuda.synchronize()
    return f"3 random runs exact; misaligned/dtype/shape/stride/device rejected; {host_us:.0f} us host time per launch"


def _tma_runs(kernel, torch, rows, reference, rule):
    """Three launches on fresh random (rows, 64) fp16 data; the output must equal ``reference(a)``."""
    for _ in range(3):
        a = torch.randn(rows, 64, device="cuda", dtype=torch.float16)
        b = _poisoned(torch, a)
        kernel(a, b)
        torch.cuda.synchronize()
        bad = (reference(a) != b) | b.isnan()
        assert not bad.any(), (
            f"{kernel.launch['name']}: {bad.sum().item()} of {a.numel()} elements break {rule}; "
            f"rows {bad.any(1).nonzero().flatten()[:8].tolist()}"
        )
    return a, b


def check_tma_copy(kernel, torch):
    from axe.runtime import LaunchError

    _, b = _tma_runs(kernel, torch, 200, lambda a: a, "B == A")
    base = torch.randn(200 * 64 + 8, device="cuda", dtype=torch.float16)
    expect_error(LaunchError, lambda: kernel(base[8:].view(200, 64), b), "'A'", "aligned")
    return "3 random runs exact (200 rows: partial last tile); misaligned rejected"


def swizzle128_reference(torch, a):
    """What a 128B-swizzled TMA load followed by a plain TMA store makes of ``a`` (64 fp16 wide)."""
    rows, cols = a.shape
    r = torch.arange(rows, device=a.device).unsqueeze(1)
    c = torch.arange(cols, device=a.device).unsqueeze(0)
    dest = ((c // 8) ^ (r % 8)) * 8 + c % 8
    out = torch.empty_like(a)
    out.scatter_(1, dest.expand(rows, cols), a)
    return out


def check_tma_swizzle(kernel, torch):
    a, b = _tma_runs(kernel, torch, 256, lambda a: swizzle128_reference(torch, a), "chunk j -> j ^ (row % 8)")
    assert not torch.equal(a, b), "tma_swizzle: output equals input, so no swizzle happened"
    return "3 random runs match the 128B swizzle (chunk j -> j ^ row%8)"


def check_cluster_rank(kernel, torch):
    assert kernel.launch["cluster"] == [2, 1, 1], kernel.launch["cluster"]
    out = torch.full((256,), -1, dtype=torch.int32, device="cuda")
    kernel(out)
    torch.cuda.synchronize()
    bx = torch.arange(256, device="cuda") // 32
    ref = ((bx % 2) * 1000 + bx // 2).int()
    assert torch.equal(out, ref), f"cluster_rank: got {out[::32].tolist()}, expected {ref[::32].tolist()}"
    return "clusters of 2: rank and cluster id as expected"


def check_axpy(kernel, torch):
    from axe.runtime import LaunchError
    from axe.runtime import launcher

    for m in (1, 37, 300):
        a = torch.randn(m, 256, device="cuda")
        bb = torch.randn(m, 256, device="cuda")
        c = _poisoned(torch, a)
        alpha = float(torch.randn(()).item())
        kernel(a, bb, c, alpha)
        torch.cuda.synchronize()
        ref = (a.double() * alpha + bb.double()).float()
        assert not c.isnan().any(), f"axpy M={m}: {c.isnan().sum().item()} outputs never written"
        err = ((c - ref).norm() / ref.norm()).item()
        assert err < 1e-6, f"axpy M={m}: relative error {err}"
    cached = len(launcher._CACHE)
    kernel(a, bb, c, 1.0)
    assert len(launcher._CACHE) == cached, "a second launch loaded the module again"
    expect_error(LaunchError, lambda: kernel(a, bb[:-1], c, 1.0), "'B'", "shape")
    expect_error(LaunchError, lambda: kernel(a, bb, c, "x"), "'alpha'")
    return "M in (1, 37, 300), rel err < 1e-6; module cached; mismatched M and bad scalar rejected"


def check_streams_sk(kernel, torch, launches=12):
    """Launches on two streams at once each get their own scratch: interleaved launches of a
    stream-K GEMM on two streams, all overlapping, every output right."""
    assert [a["name"] for a in kernel.launch["args"] if a.get("scratch")] == ["W_", "F_"], kernel.launch["args"]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    a = [torch.randn(640, 1000, device="cuda", dtype=torch.float16) for _ in streams]
    b = [torch.randn(1000, 1000, device="cuda", dtype=torch.float16) for _ in streams]
    outs = [[torch.full((640, 1000), float("nan"), device="cuda", dtype=torch.float16) for _ in range(launches)]
            for _ in streams]
    torch.cuda.synchronize()
    for i in range(launches):
        for s, st in enumerate(streams):
            with torch.cuda.stream(st):
                kernel(a[s], b[s], outs[s][i])
    torch.cuda.synchronize()
    sets = [k for k in kernel._scratch if k[1] in {st.cuda_stream for st in streams}]
    assert len(sets) == 2, f"expected one scratch set per stream, found {sorted(kernel._scratch)}"
    worst = 0.0
    for s in range(2):
        ref = a[s].float() @ b[s].float()
        for i, c in enumerate(outs[s]):
            assert not c.isnan().any(), f"stream {s} launch {i}: {c.isnan().sum().item()} outputs never written"
            err = ((c.float() - ref).norm() / ref.norm()).item()
            worst = max(worst, err)
            assert err < 2e-3, f"stream {s} launch {i}: relative error {err:.2e} (scratch shared between streams?)"
    for flags in (t for k in sets for t in kernel._scratch[k] if t.dtype == torch.int32):
        assert not flags.any(), "a launch left stream-K flags set (the next launch on that stream would misread them)"
    return (f"{launches} launches on each of 2 streams interleaved: one scratch set per stream, all {2 * launches} "
            f"outputs right (rel err {worst:.1e}), flags left zero")


CHECKS = {
    "streams_sk": check_streams_sk,
    "cluster_wait_timeout": check_cluster_wait_timeout,
    "flag_wait_timeout": check_flag_wait_timeout,
    "vcopy": check_vcopy,
    "tma_copy": check_tma_copy,
    "tma_swizzle": check_tma_swizzle,
    "axpy": check_axpy,
    "cluster_rank": check_cluster_rank,
}
