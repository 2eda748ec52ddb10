"""Run emitted NKI source on the NumPy model of the target's NeuronCore: the fake package of the
target's NKI API (:func:`.sim.namespace`: ``neuronxcc.nki`` for trn1; :func:`.sim_nki2.namespace`:
``nki.*`` for trn2) in ``sys.modules`` while the source runs, the other API's modules blocked.
"""

from __future__ import annotations

import sys

import numpy as np

from . import hardware as hw
from . import sim, sim_nki2
from .sim import HardwareError, Machine, Tensor, _dtype_name, _np_dtype

__all__ = ["run", "namespaces", "API_MODULES", "HardwareError"]

#: the module names of each target's NKI API; a source for one target importing the other's is refused
API_MODULES = {"trn1": ("neuronxcc", "neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa"),
               "trn2": ("nki", "nki.language", "nki.isa")}


def namespaces(target: str):
    """The function building ``target``'s fake NKI package for a :class:`~.sim.Machine`."""
    return {"trn1": sim.namespace, "trn2": sim_nki2.namespace}[target]


def run(source: str, name: str, inputs: dict, dtypes: dict | None = None, numerics: bool = True,
        target: str = "trn1"):
    """Exec ``source`` (unchanged) against the model of ``target`` (``trn1``: ``neuronxcc.nki`` on
    NeuronCore-v2; ``trn2``: ``nki.*`` on NeuronCore-v3) and call kernel ``name`` on numpy ``inputs``
    (by parameter name).  Returns ``(outputs as a tuple of numpy arrays, Cost)``.  With
    ``numerics=False`` every rule is still checked and every instruction charged, but TensorE
    results are zeros (fast cost estimates of large shapes).  A source importing the other
    target's NKI modules is a :class:`HardwareError`."""
    machine = Machine(numerics, hw.core(target))
    mods = namespaces(target)(machine)
    blocked = [m for t, ms in API_MODULES.items() if t != target for m in ms]
    saved = {k: sys.modules.get(k) for k in [*mods, *blocked]}
    sys.modules.update(mods)
    sys.modules.update({m: None for m in blocked})        # importing them raises ImportError
    try:
        scope: dict = {"__name__": f"axe_nki_{name}"}
        try:
            exec(compile(source, f"<nki {name}>", "exec"), scope)
        except ImportError as err:
            if err.name not in blocked:
                raise
            raise HardwareError(f"the source imports {err.name}, the NKI API of another target; the {target} "
                                f"model runs {', '.join(API_MODULES[target][-2:])}") from None
        fn = scope[name]
        args = {}
        for k, arr in inputs.items():
            dt = (dtypes or {}).get(k) or _dtype_name(arr.dtype)
            args[k] = Tensor(machine, arr.shape, dt, "hbm", k, data=np.array(arr, dtype=_np_dtype(dt)))
        with (np.errstate(under="ignore") if numerics else np.errstate(all="ignore")):   # exp underflows to 0 by design
            out = fn(**args)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    outs = out if isinstance(out, tuple) else (out,)
    return tuple(o.data for o in outs), machine.cost
