"""Build a Trainium kernel: parse it with the neuron schedules, emit NKI source — ``neuronxcc.nki``
(NKI 0.1) for trn1, ``nki.*`` (NKI 0.2+, Neuron 2.27+) for trn2 (:mod:`.nki2` respells the same
statements) — describe it in a manifest; run the artifact on the NumPy model of NKI (:mod:`.sim`)
with the target's NeuronCore (:mod:`.hardware`).

``build_kernel`` is what ``axe.lang.compile_kernel`` calls after parsing for targets of the
``neuron`` family (the language finds it as ``axe.backends.<family>.build.build_kernel``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from .emit import TargetError, emit_nki
from .nki2 import respell
from .tiles import var_name

__all__ = ["NkiArtifact", "build_kernel", "TargetError", "TARGETS"]

#: target -> the NKI API its source is written in
TARGETS = {"trn1": "nki 0.1 (neuronxcc.nki)", "trn2": "nki 0.2+ (nki.*, Neuron 2.27+)"}


@dataclass
class NkiArtifact:
    """NKI source plus what running it needs: parameter names, shapes and dtypes, outputs."""

    name: str
    target: str
    source: str
    params: dict            # name -> {"shape": [...], "dtype": str}
    outputs: tuple
    records: list = field(default_factory=list)

    def manifest(self) -> dict:
        return {"kernel": self.name, "target": self.target, "language": TARGETS[self.target],
                "source": f"{self.name}.py", "params": self.params, "outputs": list(self.outputs),
                "inputs": [p for p in self.params if p not in self.outputs],
                "schedules": [{"op": r.call.op, "where": r.call.where, "chosen": r.chosen, "plan": r.plan}
                              for r in self.records]}

    def save(self, out_dir: str) -> str:
        """Write ``NAME.py`` (NKI) and ``NAME.manifest.json`` into ``out_dir``; returns the source path."""
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"{self.name}.py")
        with open(path, "w") as f:
            f.write(self.source)
        with open(os.path.join(out_dir, f"{self.name}.manifest.json"), "w") as f:
            json.dump(self.manifest(), f, indent=1)
        return path

    def run(self, numerics: bool = True, **inputs):
        """Run on the NKI model: ``(outputs by name, Cost)``; inputs are numpy arrays by name
        (``numerics=False``: rules and cost only, TensorE results zero)."""
        from .model import run
        missing = [p for p in self.params if p not in self.outputs and p not in inputs]
        if missing:
            raise ValueError(f"{self.name}: inputs {missing} missing")
        dtypes = {k: v["dtype"] for k, v in self.params.items()}
        for k, arr in inputs.items():
            if list(arr.shape) != self.params[k]["shape"]:
                raise ValueError(f"{self.name}: input {k} has shape {list(arr.shape)}, the kernel was built "
                                 f"for {self.params[k]['shape']}")
        outs, cost = run(self.source, self.name, {k: np.asarray(v) for k, v in inputs.items()}, dtypes, numerics,
                         self.target)
        return dict(zip(self.outputs, outs)), cost


def build_kernel(k, func, ctx, target: str = "trn1"):
    """The NKI artifact of kernel ``k`` parsed for ``target`` (``func``, ``ctx``: the PrimFunc and
    build context the language's parse produced with the neuron schedules)."""
    if target not in TARGETS:
        raise TargetError(f"target {target!r} is not a Trainium target this backend builds ({', '.join(TARGETS)})")
    params = {}
    import tvm
    for p in func.params:
        if not isinstance(p, tvm.tirx.Buffer):
            raise TargetError(f"kernel {k.name}: parameter {p.name} is not a tensor (NKI kernels take tensors)")
        params[var_name(p.name)] = {"shape": [int(s) for s in p.shape], "dtype": str(p.dtype)}
    outputs = tuple(o for o in k.outputs)
    unknown = [o for o in outputs if o not in params]
    if unknown:
        raise TargetError(f"kernel {k.name}: outputs {unknown} are not parameters ({list(params)})")
    src = emit_nki(func, k.name, {n: (v["shape"], v["dtype"]) for n, v in params.items()}, outputs, target)
    if target == "trn2":
        src = respell(src)
    return NkiArtifact(k.name, target, src, params, outputs, ctx.records)
