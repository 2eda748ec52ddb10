"""The model's ``nki.*`` package (NKI 0.2+, Neuron 2.27+; trn2): every ``nisa`` instruction writes
its ``dst`` tile, ``nl`` holds allocation, loop hints, dtypes, buffers and the operator tokens the
instructions take (``op=nl.add``, ``op=nl.exp``).

Signatures are the documented ones common to Neuron 2.27 (NKI 0.2.0) and 2.32 (NKI 0.6.0)
(:data:`~.nki_api.NKI2_CALLS`); each instruction checks the memory and shape rules its reference
page states (cited per function as [v2.27.0 nki.isa.<name>]) and the NeuronCore-v3 limits of
:mod:`.hardware`, and charges its engine.  Calls of the ``neuronxcc.nki`` spelling are refused by
name (:func:`.sim.api_module`): ``nl.load``, ``nl.mgrid``, ``nl.add(x, y)`` computing a value.
"""

from __future__ import annotations

import types

import numpy as np

from .sim import NKI1_NAMES, HardwareError, Tensor, View, _round, api_module, jit, language_module

__all__ = ["namespace", "Op"]

_16BIT = ("float16", "bfloat16")


class Op:
    """An operator token (``nl.add``, ``nl.exp``): names what an instruction applies; calling it
    computes nothing in the nki.* API axe emits (NKI 0.2.0 documents these functions as "not
    supported"; 0.3+ re-adds them as convenience wrappers, which axe does not emit)."""

    def __init__(self, name, fn, alu=True, activation=False):
        self.name, self.fn, self.alu, self.activation = name, fn, alu, activation

    def __call__(self, *args, **kwargs):
        raise HardwareError(f"nl.{self.name}(...) computes a value in the neuronxcc.nki API (trn1); in the nki.* "
                            f"API (trn2) nl.{self.name} names an operator for a nisa instruction "
                            f"(op=nl.{self.name})")

    def __repr__(self):
        return f"nl.{self.name}"


_ALU = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
        "minimum": np.minimum}                                     # [v2.27.0 nki.api.shared, tbl-aluop]
_CMP = {"equal": np.equal, "greater_equal": np.greater_equal}   # [v2.27.0 nki.api.shared, tbl-aluop]
_ACT = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda a: 1.0 / np.sqrt(a), "abs": np.abs,
        "copy": lambda a: a}                                      # [v2.27.0 nki.api.shared, tbl-act-func]


def _tile(x, what, buffers=("sbuf", "psum")) -> View:
    """``x`` as a view of an on-chip (or ``buffers``) tensor with at least one element."""
    if isinstance(x, Tensor):
        x = x[...]
    if not isinstance(x, View):
        raise HardwareError(f"{what}: expected a tensor (indexed tile), got {type(x).__name__}")
    if x.tensor.buffer not in buffers:
        raise HardwareError(f"{what}: {x.tensor!r} is in {x.tensor.buffer}; this operand must be in "
                            f"{' or '.join(buffers)}")
    if x.fast is None:
        raise HardwareError(f"{what}: index of {x.tensor!r} is not a slice inside the tensor (shape "
                            f"{list(x.tensor.shape)})")
    if not x.shape or 0 in x.shape:
        raise HardwareError(f"{what}: an empty tile of {x.tensor!r} (shape {list(x.shape)})")
    return x


def _same_partitions(what, dst, *srcs):
    for s in srcs:
        if s.shape[0] != dst.shape[0]:
            raise HardwareError(f"{what}: partition sizes {s.shape[0]} ({s.tensor.name}) and {dst.shape[0]} "
                                f"({dst.tensor.name}) differ")


def _scalar(x, what, parts):
    """A compile-time float or a ``(parts, 1)`` on-chip vector, as an array broadcasting along F."""
    if isinstance(x, (int, float)):
        return np.float32(x)
    v = _tile(x, what)
    if tuple(v.shape) != (parts, 1):
        raise HardwareError(f"{what}: a scalar or a ({parts}, 1) vector, got shape {list(v.shape)}")
    return v.read()


def _op(x, what, kind):
    if not isinstance(x, Op) or not getattr(x, kind):
        raise HardwareError(f"{what}: {x!r} is not an nki.language {'ALU operator' if kind == 'alu' else 'activation'}")
    return x


def namespace(machine):
    """The fake ``nki`` package (``nki``, ``nki.language``, ``nki.isa``) bound to ``machine``."""
    core = machine.core

    def vector(what, dst, *srcs, inputs=1, kind="copy"):
        """Charge VectorE with NeuronCore-v3's performance mode ([ARCH2]): BF16/FP16 operands all
        in SBUF run tensor_copy/tensor_scalar at ``16bit_sbuf`` elements per lane per cycle,
        tensor_tensor (and copies touching PSUM) at ``16bit``."""
        views = (dst, *srcs)
        rate = core.vector_lane_rate["default"]
        if all(v.tensor.dtype in _16BIT for v in views):
            in_sbuf = all(v.tensor.buffer == "sbuf" for v in views)
            if kind == "copy":
                rate = core.vector_lane_rate["16bit_sbuf" if in_sbuf else "16bit"]
            elif in_sbuf:
                rate = core.vector_lane_rate["16bit"]
        machine._engine("vector", dst.shape, what, inputs=inputs, rate=rate)

    def out(dst, data):
        dst.put(_round(data, dst.tensor.dtype) if machine.numerics else data)

    nl = language_module(machine, "nki.language")
    for name, fn in _ALU.items():
        setattr(nl, name, Op(name, fn))
    for name, fn in _ACT.items():
        setattr(nl, name, Op(name, fn, alu=name in ("rsqrt", "abs"), activation=True))
    for name, fn in _CMP.items():
        setattr(nl, name, Op(name, fn))

    isa = types.ModuleType("nki.isa")

    def dma_copy(dst, src, oob_mode=None, dge_mode=None, name=None):
        """[v2.27.0 nki.isa.dma_copy] src and dst in HBM or SBUF, equal element counts; [MIG] 0.3.0:
        no reads from PSUM (evict to SBUF first)."""
        d = _tile(dst, "nisa.dma_copy dst", ("hbm", "sbuf"))
        s = _tile(src, "nisa.dma_copy src", ("hbm", "sbuf"))
        if d.tensor.buffer == "hbm" and s.tensor.buffer == "hbm":
            raise HardwareError("nisa.dma_copy: HBM to HBM is not a copy axe emits (one side on-chip)")
        if np.prod(d.shape) != np.prod(s.shape):
            raise HardwareError(f"nisa.dma_copy: src {list(s.shape)} and dst {list(d.shape)} hold different numbers "
                                "of elements")
        data = s.read() if machine.numerics else np.zeros(s.shape, np.float32)
        out(d, data.reshape(d.shape))
        machine._dma(int(np.prod(s.shape)) * _bytes(s), "nisa.dma_copy")

    def dma_transpose(dst, src, axes=None, dge_mode=None, name=None):
        """[ARCH2] "HBM2SBUF DMA transpose": the most minor dim of src becomes dst's partition dim."""
        d = _tile(dst, "nisa.dma_transpose dst", ("sbuf",))
        s = _tile(src, "nisa.dma_transpose src", ("hbm", "sbuf"))
        if len(s.shape) != 2 or tuple(d.shape) != tuple(s.shape[::-1]):
            raise HardwareError(f"nisa.dma_transpose: dst {list(d.shape)} must be src {list(s.shape)} transposed "
                                "(2-D; [MIG] 0.4.0 enforces the shape exactly)")
        if axes not in (None, (1, 0), [1, 0]):
            raise HardwareError(f"nisa.dma_transpose: axes {axes} for a 2-D tile must be (1, 0)")
        out(d, s.read().T if machine.numerics else np.zeros(d.shape, np.float32))
        machine._dma(int(np.prod(s.shape)) * _bytes(s), "nisa.dma_transpose", core.dma_transpose_efficiency)

    def tensor_copy(dst, src, engine=None, name=None):
        """[v2.27.0 nki.isa.tensor_copy] on-chip to on-chip, same partitions and elements per partition."""
        d, s = _tile(dst, "nisa.tensor_copy dst"), _tile(src, "nisa.tensor_copy src")
        _same_partitions("nisa.tensor_copy", d, s)
        if d.shape != s.shape:
            raise HardwareError(f"nisa.tensor_copy: src {list(s.shape)} and dst {list(d.shape)} differ")
        out(d, s.read())
        vector("nisa.tensor_copy", d, s)

    def memset(dst, value, engine=None, name=None):
        """[v2.27.0 nki.isa.memset] fill with a compile-time constant (Vector/GpSimd; PSUM via Vector)."""
        d = _tile(dst, "nisa.memset dst")
        if not isinstance(value, (int, float)):
            raise HardwareError("nisa.memset: value must be a compile-time constant")
        out(d, np.full(d.shape, value, np.float32))
        vector("nisa.memset", d)

    def tensor_tensor(dst, data1, data2, op, engine=None, name=None):
        """[v2.27.0 nki.isa.tensor_tensor] same shapes; data1 and data2 not both in PSUM; ~2N cycles."""
        d, a, b = _tile(dst, "nisa.tensor_tensor dst"), _tile(data1, "nisa.tensor_tensor data1"), \
            _tile(data2, "nisa.tensor_tensor data2")
        o = _op(op, "nisa.tensor_tensor op", "alu")
        if a.shape != d.shape or b.shape != d.shape:
            raise HardwareError(f"nisa.tensor_tensor: data1 {list(a.shape)}, data2 {list(b.shape)} and dst "
                                f"{list(d.shape)} must match (broadcasts along F: nisa.tensor_scalar)")
        if a.tensor.buffer == "psum" and b.tensor.buffer == "psum":
            raise HardwareError("nisa.tensor_tensor: data1 and data2 cannot both reside in PSUM")
        out(d, o.fn(a.read(), b.read()))
        vector("nisa.tensor_tensor", d, a, b, inputs=2, kind="tensor")

    def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                      engine=None, name=None):
        """[v2.27.0 nki.isa.tensor_scalar] ``(data op0 operand0) op1 operand1``, operands scalars or
        (P, 1) vectors broadcast along F; ``reverse``: the operand is the left-hand side."""
        d, x = _tile(dst, "nisa.tensor_scalar dst"), _tile(data, "nisa.tensor_scalar data")
        if x.shape != d.shape:
            raise HardwareError(f"nisa.tensor_scalar: data {list(x.shape)} and dst {list(d.shape)} differ")
        v = x.read()
        for o, operand, rev, k in ((op0, operand0, reverse0, 0), (op1, operand1, reverse1, 1)):
            if o is None:
                if operand is not None:
                    raise HardwareError(f"nisa.tensor_scalar: operand{k} given without op{k}")
                continue
            fn = _op(o, f"nisa.tensor_scalar op{k}", "alu").fn
            c = _scalar(operand, f"nisa.tensor_scalar operand{k}", d.shape[0])
            v = fn(c, v) if rev else fn(v, c)
        out(d, v)
        vector("nisa.tensor_scalar", d, x)

    def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
        """[v2.27.0 nki.isa.tensor_reduce] along free axes only (axis 0 is the partition axis)."""
        d, x = _tile(dst, "nisa.tensor_reduce dst"), _tile(data, "nisa.tensor_reduce data")
        o = _op(op, "nisa.tensor_reduce op", "alu")
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        if 0 in axes:
            raise HardwareError("nisa.tensor_reduce: axis 0 is the partition dimension; reduce along free axes "
                                "(transpose first, or a TensorE ones-matmul)")
        r = o.fn.reduce(x.read(), axis=axes, keepdims=keepdims)
        if tuple(r.shape) != tuple(d.shape):
            raise HardwareError(f"nisa.tensor_reduce: the result {list(r.shape)} does not fit dst {list(d.shape)}")
        out(d, -r if negate else r)
        vector("nisa.tensor_reduce", x, kind="tensor")

    def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None,
                   name=None):
        """[v2.27.0 nki.isa.activation] ``op(data * scale + bias)`` on ScalarE in float32; bias and
        scale a (P, 1) vector or, from NeuronCore-v3, a compile-time scalar."""
        d, x = _tile(dst, "nisa.activation dst"), _tile(data, "nisa.activation data")
        o = _op(op, "nisa.activation op", "activation")
        if x.shape != d.shape:
            raise HardwareError(f"nisa.activation: data {list(x.shape)} and dst {list(d.shape)} differ")
        if reduce_op is not None or reduce_res is not None:
            raise HardwareError("nisa.activation: the model does not implement reduce_op/reduce_res")
        v = x.read() * _scalar(scale, "nisa.activation scale", d.shape[0])
        if bias is not None:
            v = v + _scalar(bias, "nisa.activation bias", d.shape[0])
        out(d, o.fn(v))
        machine._engine("scalar", d.shape, "nisa.activation")

    def reciprocal(dst, data, name=None):
        """[v2.27.0 nki.isa.reciprocal] 1/x on VectorE: [SHARED] ``max(MIN_II, 8*N)`` cycles."""
        d, x = _tile(dst, "nisa.reciprocal dst"), _tile(data, "nisa.reciprocal data")
        if x.shape != d.shape:
            raise HardwareError(f"nisa.reciprocal: data {list(x.shape)} and dst {list(d.shape)} differ")
        out(d, 1.0 / x.read())
        machine._engine("vector", d.shape, "nisa.reciprocal", inputs=8)

    def affine_select(dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value, cmp_op=None,
                      name=None):
        """[v2.27.0 nki.isa.affine_select] GpSimd: ``dst[c, x] = on_true_tile[c, x]`` where
        ``cmp_op(offset + c·channel_multiplier + Σ step_i·x_i, 0)`` (``pattern`` = ``[[step, num], ...]``
        over the free elements, row-major; ``cmp_op`` by default ``nl.equal``), else
        ``on_false_value``; dst and on_true_tile in SBUF, the same shape; "150 + N" cycles."""
        d = _tile(dst, "nisa.affine_select dst", ("sbuf",))
        x = _tile(on_true_tile, "nisa.affine_select on_true_tile", ("sbuf",))
        if x.shape != d.shape:
            raise HardwareError(f"nisa.affine_select: on_true_tile {list(x.shape)} and dst {list(d.shape)} differ")
        if not isinstance(on_false_value, (int, float)):
            raise HardwareError("nisa.affine_select: on_false_value must be a compile-time scalar")
        cmp = nl.equal if cmp_op is None else cmp_op
        if not isinstance(cmp, Op) or cmp.name not in _CMP:
            raise HardwareError(f"nisa.affine_select: cmp_op {cmp!r} is not a comparison of nki.language")
        steps = [(int(step), int(num)) for step, num in pattern]
        if int(np.prod([n for _, n in steps])) != int(np.prod(d.shape[1:])):
            raise HardwareError(f"nisa.affine_select: pattern {pattern} does not cover the {int(np.prod(d.shape[1:]))} "
                                "elements per partition of dst")
        value = np.full((d.shape[0],) + tuple(n for _, n in steps), int(offset), np.int64)
        value += (np.arange(d.shape[0]) * int(channel_multiplier)).reshape((-1,) + (1,) * len(steps))
        for i, (step, num) in enumerate(steps):
            value += (np.arange(num) * step).reshape((1,) * (i + 1) + (num,) + (1,) * (len(steps) - i - 1))
        keep = cmp.fn(value, 0).reshape(d.shape)
        out(d, np.where(keep, x.read(), np.float32(on_false_value)))
        machine.cost.charge("gpsimd", (150 + int(np.prod(d.shape[1:]))) / core.engine_hz["gpsimd"],
                            "nisa.affine_select")

    def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
                  is_transpose=False, tile_position=(), tile_size=(), perf_mode=None, name=None):
        """[v2.27.0 nki.isa.nc_matmul] ``dst = stationary.T @ moving`` into PSUM.  Accumulation as
        NKI 0.2.0 does it, and 0.3+ by default (``accumulate=None``, [MIG] 0.3.0): the first write
        to a PSUM location overwrites, later ones accumulate."""
        d = _tile(dst, "nisa.nc_matmul dst", ("psum",))
        for flag, t in ((is_stationary_onezero, stationary), (is_moving_onezero, moving)):
            if flag and machine.numerics and not np.isin(_tile(t, "nisa.nc_matmul").read(), (0.0, 1.0)).all():
                raise HardwareError(f"nisa.nc_matmul: {t.tensor.name} is declared one/zero but holds other values")
        v = machine.nc_matmul(_tile(stationary, "nisa.nc_matmul stationary", ("sbuf",)),
                              _tile(moving, "nisa.nc_matmul moving", ("sbuf",)))
        if d.tensor.dtype != "float32" or tuple(d.shape) != tuple(v.shape):
            raise HardwareError(f"nisa.nc_matmul: dst {d.tensor!r} {list(d.shape)} must be a float32 PSUM tile of "
                                f"the result's shape {list(v.shape)}")
        d._check_bank()
        if machine.numerics:
            written = _written(d)
            d.put(np.where(written, d.read() + v.data, v.data))
            written[...] = True

    def nc_transpose(dst, data, engine=None, name=None):
        """[v2.27.0 nki.isa.nc_transpose] TensorE: SBUF in, PSUM out, "The output dst tile must have
        the same data type as that of data", at most 128x128."""
        d = _tile(dst, "nisa.nc_transpose dst", ("psum",))
        x = _tile(data, "nisa.nc_transpose data", ("sbuf",))
        if d.tensor.dtype != x.tensor.dtype:
            raise HardwareError(f"nisa.nc_transpose: dst dtype {d.tensor.dtype} must equal data's {x.tensor.dtype}")
        v = machine.nc_transpose(x)
        if tuple(d.shape) != tuple(v.shape):
            raise HardwareError(f"nisa.nc_transpose: dst {list(d.shape)} must be data {list(x.shape)} transposed")
        out(d, v.data)

    for f in (dma_copy, dma_transpose, tensor_copy, memset, tensor_tensor, tensor_scalar, tensor_reduce, activation,
              reciprocal, affine_select, nc_matmul, nc_transpose):
        setattr(isa, f.__name__, f)

    nki = types.ModuleType("nki")
    nki.jit, nki.language, nki.isa = jit, nl, isa
    for mod in (nl, isa, nki):
        api_module(mod, "nki.* (NKI 0.2+, trn2)", NKI1_NAMES,
                   "the neuronxcc.nki API (NKI 0.1, trn1)")
    return {"nki": nki, "nki.language": nl, "nki.isa": isa}


def _bytes(view) -> int:
    from .hardware import DTYPE_BYTES
    return DTYPE_BYTES[view.tensor.dtype]


def _written(view) -> np.ndarray:
    """The PSUM locations of ``view`` a matmul has written since the tile's allocation (a NumPy view)."""
    t = view.tensor
    if not hasattr(t, "written"):
        t.written = np.zeros(t.shape, bool)
    slices, _ = view.fast
    return t.written[slices]
