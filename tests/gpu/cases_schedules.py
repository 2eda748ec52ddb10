"""GPU cases for every CUDA schedule: one small kernel per schedule (or family), checked against
torch on fresh random inputs with the outputs poisoned (NaN) before every launch.

The kernels are in ``_kernels_schedules.py`` (build side, imports TVM); each build refuses an
artifact whose dispatch did not choose the schedules the case names, so every check below
tests the schedule in its name: copy ``tma`` + ``tma_store`` (swizzled and plain tiles),
``ldmatrix`` (+ ``.trans``), ``stmatrix`` (+ ``.trans``), ``cp_async``, ``vector``
(global↔registers, global↔shared), ``per_thread``; reduce ``warp_shuffle``, ``cta_smem``,
``in_thread`` (sum, max and min each); elementwise unary, binary, cast and a fused lambda.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _builder(name):
    def build():
        sys.path.insert(0, HERE)
        import _kernels_schedules as K

        import axe.lang as Ax
        kernel, want = K.KERNELS[name]
        art = Ax.compile_kernel(kernel, "sm_90a")
        got = [r.chosen for r in art.records]
        if got != want:
            raise AssertionError(f"{name}: dispatch chose {got}, the case tests {want}")
        return art
    return build


NAMES = ["sched_tma_swizzle", "sched_tma_plain", "sched_ldmatrix", "sched_stmatrix", "sched_cp_async",
         "sched_vector", "sched_per_thread", "sched_reduce_warp", "sched_reduce_cta", "sched_reduce_thread",
         "sched_elementwise"]
BUILDS = {n: _builder(n) for n in NAMES}


def _args(kernel):
    """(name, shape, dtype) of each tensor argument, in call order."""
    return [(a["name"].rstrip("_"), tuple(a["shape"]), a["dtype"]) for a in kernel.launch["args"]
            if a["kind"] == "tensor"]


def _launch(kernel, torch, n_inputs):
    """Random inputs for the first ``n_inputs`` tensor arguments, NaN-poisoned outputs for the
    rest; launch; return (inputs, outputs) as name → tensor dicts."""
    ins, outs = {}, {}
    for i, (name, shape, dtype) in enumerate(_args(kernel)):
        dt = getattr(torch, dtype)
        if i < n_inputs:
            ins[name] = torch.randn(shape, device="cuda", dtype=dt)
        else:
            outs[name] = torch.full(shape, float("nan"), device="cuda", dtype=dt)
    kernel(*ins.values(), *outs.values())
    torch.cuda.synchronize()
    return ins, outs


def _exact(kernel, torch, n_inputs, expected, runs=3):
    """``runs`` launches; each output must equal ``expected(inputs)[name]`` bit for bit."""
    for _ in range(runs):
        ins, outs = _launch(kernel, torch, n_inputs)
        want = expected(ins)
        for name, got in outs.items():
            bad = (got != want[name]) | got.isnan()
            assert not bad.any(), (f"{kernel.launch['name']}: output {name}: {bad.sum().item()} of {got.numel()} "
                                   f"elements wrong, first at {bad.nonzero()[:4].tolist()}")
    return f"{runs} random runs exact ({', '.join(f'{n}{list(t.shape)}' for n, t in outs.items())})"


def check_copy(kernel, torch):
    return _exact(kernel, torch, 1, lambda i: {"B": i["A"]})


def check_copy_and_transpose(kernel, torch):
    return _exact(kernel, torch, 1, lambda i: {"B": i["A"], "C": i["A"].t()})


def check_copy_twice(kernel, torch):
    return _exact(kernel, torch, 1, lambda i: {"B": i["A"], "C": i["A"]})


def check_reduce(kernel, torch):
    worst = 0.0
    for _ in range(3):
        ins, outs = _launch(kernel, torch, 1)
        x = ins["X"].double()
        want = {"Ys": x.sum(1, keepdim=True), "Yx": x.amax(1, keepdim=True), "Yn": x.amin(1, keepdim=True)}
        for name, ref in want.items():
            got = outs[name]
            assert not got.isnan().any(), f"{kernel.launch['name']}: {name}: {got.isnan().sum().item()} never written"
            if name == "Ys":
                err = ((got.double() - ref).norm() / ref.norm()).item()
                worst = max(worst, err)
                assert err < 1e-5, f"{kernel.launch['name']}: row sums relative error {err:.2e}"
            else:
                assert torch.equal(got.double(), ref), f"{kernel.launch['name']}: row {name} differs: {(got.double() - ref).abs().max().item()}"
    return f"{list(ins['X'].shape)} fp32, 3 random runs: max/min exact, sum rel err {worst:.1e}"


def check_elementwise(kernel, torch):
    worst = {}
    for _ in range(3):
        ins, outs = _launch(kernel, torch, 2)
        x, y = ins["X"].double(), ins["Y"].double()
        want = {"U": (x.exp(), 2e-3), "V": (x + y, 1e-3), "W": (x, 0.0), "Z": (x * y + 1, 1e-6)}
        for name, (ref, tol) in want.items():
            got = outs[name]
            assert not got.isnan().any(), f"sched_elementwise: {name}: {got.isnan().sum().item()} never written"
            err = ((got.double() - ref).norm() / ref.norm()).item()
            worst[name] = max(worst.get(name, 0.0), err)
            assert err <= tol, f"sched_elementwise: {name} relative error {err:.2e} > {tol}"
    return "exp/add/cast/fused, 3 random runs, rel err " + ", ".join(f"{k} {v:.0e}" for k, v in worst.items())


CHECKS = {
    "sched_tma_swizzle": check_copy,
    "sched_tma_plain": check_copy,
    "sched_ldmatrix": check_copy_and_transpose,
    "sched_stmatrix": check_copy_twice,
    "sched_cp_async": check_copy,
    "sched_vector": check_copy_twice,
    "sched_per_thread": check_copy,
    "sched_reduce_warp": check_reduce,
    "sched_reduce_cta": check_reduce,
    "sched_reduce_thread": check_reduce,
    "sched_elementwise": check_elementwise,
}
