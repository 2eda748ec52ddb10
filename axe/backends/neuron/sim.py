"""An executable NumPy model of the NKI subset axe emits, with each NeuronCore's hardware rules and
a cost model.

:func:`.model.run` execs the emitted NKI source text unchanged against a fake NKI package whose
calls are NumPy implementations: ``neuronxcc.nki`` (NKI 0.1: ``nl.load``,
values returned by calls) for trn1, ``nki.*`` (NKI 0.2+: ``nisa.*`` instructions writing a ``dst``;
:mod:`.sim_nki2`) for trn2.  Both bind one :class:`Machine` whose :class:`~.hardware.Core` holds
the generation's numbers.  Every call checks the rules the hardware and the NKI compiler impose
(128 partitions, SBUF/PSUM capacity, 8 PSUM banks, TensorE tile limits, dtypes, partition
dimension first) and raises :class:`HardwareError` naming the call, the operand and the
condition; a call spelled for the other generation's API (another signature, a name that API
lacks, an import of its modules) is a :class:`HardwareError` too.  Each call is also charged to
its engine (TensorE, VectorE, ScalarE, GpSimd, DMA) in a :class:`Cost` record.

Semantics chosen to catch wrong kernels rather than hide them: a masked load writes only the
elements its mask selects (the rest of the destination keeps what it held, as on hardware); a
tile from ``nl.ndarray`` starts as NaN (uninitialised memory), ``nl.zeros`` as zeros.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from math import ceil, prod

import numpy as np

from . import hardware as hw

__all__ = ["HardwareError", "Cost", "Machine", "namespace", "language_module", "api_module", "jit"]

try:
    import ml_dtypes
    _BF16 = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover - ml_dtypes comes with TVM
    _BF16 = None

_NP = {"float16": np.float16, "float32": np.float32, "bfloat16": _BF16, "int32": np.int32}


class HardwareError(ValueError):
    """Emitted NKI breaks a NeuronCore rule (or an NKI API rule): the message names call, operand, rule."""


def _np_dtype(name):
    return _NP[name]


def _dtype_name(x) -> str:
    if isinstance(x, str):
        return x
    for k, v in _NP.items():
        if v is not None and np.dtype(x) == np.dtype(v):
            return k
    raise HardwareError(f"dtype {x!r} is not one the model supports ({sorted(_NP)})")


@dataclass
class Cost:
    """Busy time per engine (seconds), bytes moved, TensorE flops and instruction counts."""

    engine_s: dict = field(default_factory=lambda: {"tensor": 0.0, "vector": 0.0, "scalar": 0.0, "gpsimd": 0.0,
                                                     "dma": 0.0})
    counts: dict = field(default_factory=dict)
    flops: float = 0.0
    dma_bytes: int = 0
    peak_flops: float = hw.TRN1.tensore_peak_flops     # the core's BF16 TensorE peak (utilization's unit)

    def charge(self, engine: str, seconds: float, what: str):
        self.engine_s[engine] += seconds
        self.counts[what] = self.counts.get(what, 0) + 1

    @property
    def time_s(self) -> float:
        """Estimated time with the engines overlapped perfectly (the busiest engine bounds it)."""
        return max(self.engine_s.values())

    @property
    def serial_s(self) -> float:
        """Estimated time with no overlap at all (an upper bound)."""
        return sum(self.engine_s.values())

    @property
    def tensore_utilization(self) -> float:
        """Useful TensorE flops over what the peak delivers in :attr:`time_s`."""
        t = self.time_s
        return self.flops / (self.peak_flops * t) if t > 0 else 0.0

    def summary(self) -> str:
        e = ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in self.engine_s.items())
        return (f"estimated {self.time_s * 1e6:.1f} us (engines overlapped; {self.serial_s * 1e6:.1f} us serial); "
                f"TensorE utilization {self.tensore_utilization:.1%}; {e}; "
                f"{self.flops / 1e9:.2f} GFLOP, {self.dma_bytes / 1e6:.2f} MB DMA")




# --------------------------------------------------------------------------------------------
# tensors, views and values


class Tensor:
    """An NKI tensor: ``buffer`` is "hbm", "sbuf" or "psum"; on-chip axis 0 is the partition dim."""

    def __init__(self, machine, shape, dtype, buffer, name, data=None, fill=np.nan):
        self.machine, self.shape, self.dtype, self.buffer, self.name = machine, tuple(shape), dtype, buffer, name
        if data is None:
            data = np.full(self.shape, fill, dtype=np.float32).astype(_np_dtype(dtype))
        self.data = data

    def __getitem__(self, idx):
        return View(self, idx if isinstance(idx, tuple) else (idx,))

    def __setitem__(self, idx, value):
        View(self, idx if isinstance(idx, tuple) else (idx,)).write(value)

    def __repr__(self):
        return f"{self.buffer} tensor {self.name}{list(self.shape)} {self.dtype}"


def _norm_index(t: Tensor, idx):
    """Index arrays (broadcastable) for ``idx`` on ``t``: slices and ``...`` become aranges."""
    if len(idx) == 1 and idx[0] is Ellipsis:
        idx = tuple(slice(None) for _ in t.shape)
    if len(idx) != len(t.shape):
        raise HardwareError(f"index of {t!r}: {len(idx)} indices for {len(t.shape)} dimensions")
    out, kinds = [], []
    for d, (ix, n) in enumerate(zip(idx, t.shape)):
        if isinstance(ix, slice):
            lo, hi, step = ix.indices(n)
            if step != 1:
                raise HardwareError(f"index of {t!r}: dimension {d} slice step {step} (the model supports 1)")
            if ix.stop is not None and ix.stop > n or (ix.start or 0) < 0:
                raise HardwareError(f"index of {t!r}: dimension {d} slice {ix.start}:{ix.stop} outside extent {n}")
            ar = np.arange(lo, hi)
            kinds.append(("slice", d))
        elif isinstance(ix, (int, np.integer)):
            ar = np.array([int(ix)])
            kinds.append(("int", d))
        else:
            ar = np.asarray(ix)
            if ar.dtype.kind not in "iu":
                raise HardwareError(f"index of {t!r}: dimension {d} index has dtype {ar.dtype}")
            kinds.append(("grid", ar.shape))
        out.append(ar)
    return out, kinds


class View:
    """``tensor[idx]``: reads and writes through slices and ints (basic indexing) or through
    ``nl.mgrid`` index grids and ints (grid indexing); the two forms are not mixed."""

    def __init__(self, tensor: Tensor, idx):
        self.tensor, self.idx = tensor, idx
        arrays, kinds = _norm_index(tensor, idx)
        if all(k[0] != "grid" for k in kinds):          # basic indexing: outer product of ranges
            self.grids = list(np.ix_(*arrays))
            self.full = tuple(len(a) for a in arrays)
            self.shape = tuple(len(a) for a, k in zip(arrays, kinds) if k[0] == "slice")
        else:
            if any(k[0] == "slice" for k in kinds):
                raise HardwareError(f"index of {tensor!r}: slices mixed with index grids (use nl.mgrid for every dim)")
            self.grids = [np.asarray(a) if k[0] == "grid" else np.asarray(a).reshape(()) for a, k in zip(arrays, kinds)]
            self.full = np.broadcast_shapes(*[g.shape for g in self.grids])
            self.shape = self.full
        if tensor.buffer != "hbm":
            self._check_partition_first(arrays, kinds)
        self.fast = self._as_slices()

    def _as_slices(self):
        """``(slices, axes)`` when every index is a unit-stride range along one axis of the view
        (or a constant) inside the tensor: the view is then a transposed NumPy slice (fast path).
        ``axes[i]`` is the view axis of the i-th kept tensor dim.  None otherwise."""
        slices, axes = [], []
        for g, n in zip(self.grids, self.tensor.shape):
            g = np.asarray(g)
            varying = [a for a, e in enumerate(g.shape) if e > 1]
            if not varying:
                c = int(g.reshape(-1)[0])
                if not 0 <= c < n:
                    return None
                slices.append(c)
                continue
            if len(varying) > 1 or len(g.shape) != len(self.full):
                return None
            flat = g.reshape(-1)
            lo = int(flat[0])
            if lo < 0 or lo + flat.size > n or not np.array_equal(flat, np.arange(lo, lo + flat.size)):
                return None
            slices.append(slice(lo, lo + flat.size))
            axes.append(varying[0])
        if len(set(axes)) != len(axes):
            return None
        return tuple(slices), axes

    def _region(self):
        """The tensor's storage under this view, arranged with the view's full shape (a NumPy view)."""
        slices, axes = self.fast
        region = self.tensor.data[slices]
        order = sorted(range(len(axes)), key=lambda i: axes[i])
        return np.transpose(region, order).reshape(self.full)

    def _check_partition_first(self, arrays, kinds):
        """[LOAD] the partition dimension is the first index of an on-chip tile."""
        if kinds[0][0] == "grid":
            shp = np.asarray(arrays[0]).shape
            if len(shp) != 2 or shp[1] != 1:
                raise HardwareError(f"index of {self.tensor!r}: the partition index must vary along the "
                                    f"first (partition) dimension of the tile, got an index of shape {shp}")
        pmax = self.tensor.machine.core.pmax
        if len(self.shape) and self.shape[0] > pmax:
            raise HardwareError(f"{self.tensor!r}: a tile of {self.shape[0]} partitions > {pmax}")

    def _in_bounds(self):
        ok = np.ones(self.full, dtype=bool)
        for g, n in zip(self.grids, self.tensor.shape):
            ok = ok & (g >= 0) & (g < n)
        return ok

    def _mask(self, mask):
        return np.ones(self.full, bool) if mask is None else np.broadcast_to(np.asarray(mask).reshape(
            np.shape(mask) if np.ndim(mask) == len(self.full) else self.full), self.full)

    def read(self, mask=None) -> np.ndarray:
        """The selected elements as float32; out-of-bounds elements are an error unless masked off."""
        if self.fast is not None:
            return self._region().astype(np.float32).reshape(self.shape)
        sel = self._mask(mask)
        ok = self._in_bounds()
        if not ok[sel].all():
            bad = np.argwhere(sel & ~ok)[0]
            raise HardwareError(f"access to {self.tensor!r} out of bounds at tile element {tuple(bad)} "
                                f"(shape {list(self.tensor.shape)}); mask it off")
        clipped = tuple(np.clip(g, 0, n - 1) for g, n in zip(self.grids, self.tensor.shape))
        vals = self.tensor.data[clipped].astype(np.float32)
        return np.broadcast_to(vals, self.full).reshape(self.shape)

    def put(self, data, mask=None):
        """Write ``data`` (broadcast to the view) where ``mask`` holds, cast to the tensor's dtype."""
        if self.fast is not None and not self.tensor.machine.numerics:
            return                      # cost-only run: in bounds, nothing to compute
        if self.fast is not None:
            arr = np.broadcast_to(data, self.shape).reshape(self.full).astype(_np_dtype(self.tensor.dtype))
            np.copyto(self._region(), arr, where=True if mask is None else self._mask(mask))
            return
        sel = self._mask(mask)
        if not self._in_bounds()[sel].all():
            raise HardwareError(f"write to {self.tensor!r} out of bounds (shape {list(self.tensor.shape)}); mask it off")
        arr = np.broadcast_to(np.broadcast_to(data, self.shape).reshape(self.full), self.full)
        idx = tuple(np.broadcast_to(g, self.full)[sel] for g in self.grids)
        self.tensor.data[idx] = arr[sel].astype(_np_dtype(self.tensor.dtype))

    def write(self, value):
        v = as_value(value, f"assignment to {self.tensor!r}")
        if self.tensor.buffer == "psum" and v.produced_by == "load":
            raise HardwareError(f"assignment to {self.tensor!r}: nl.load writes SBUF, not PSUM")
        if self.tensor.buffer == "hbm":
            raise HardwareError(f"assignment to {self.tensor!r}: HBM is written by nl.store only")
        if self.tensor.buffer == "sbuf" and v.produced_by == "matmul":
            raise HardwareError(f"assignment to {self.tensor!r}: TensorE writes PSUM, not SBUF")
        if v.shape and tuple(v.shape) != tuple(self.shape) and np.broadcast_shapes(v.shape, self.shape) != tuple(self.shape):
            raise HardwareError(f"assignment to {self.tensor!r}: value shape {list(v.shape)} does not fit "
                                f"the view {list(self.shape)}")
        if self.tensor.buffer == "psum" and v.produced_by == "matmul":
            self._check_bank()
        self.put(v.data, v.mask)

    def _check_bank(self):
        """[ARCH] a TensorE result lands in one PSUM bank (2 KiB, 512 fp32 per partition)."""
        flat = np.broadcast_to(self.grids[-1], self.full).ravel() if len(self.grids) > 1 else np.array([0])
        inner = prod(self.tensor.shape[1:-1]) if len(self.tensor.shape) > 2 else 1
        lo, hi = int(flat.min()) * inner, int(flat.max()) * inner
        width = self.tensor.machine.core.psum_bank_bytes // 4
        if lo // width != hi // width:
            raise HardwareError(f"TensorE result into {self.tensor!r} free range [{lo}, {hi}] crosses a PSUM bank "
                                f"({width} fp32 per bank)")

    def broadcast_to(self, shape):
        """[nki.tensor.broadcast_to] a one-partition tile repeated on ``shape[0]`` partitions."""
        v = as_value(self, "broadcast_to")
        shape = tuple(int(e) for e in shape)
        pmax = self.tensor.machine.core.pmax
        if len(shape) != len(v.shape) or shape[0] > pmax:
            raise HardwareError(f"broadcast_to {shape}: a 2-D shape of at most {pmax} partitions")
        try:
            data = np.broadcast_to(v.data, shape).copy()
        except ValueError:
            raise HardwareError(f"broadcast_to: {list(v.shape)} does not broadcast to {list(shape)}") from None
        # assumption: a partition broadcast costs one pass of the free size on GpSimd
        self.tensor.machine._engine("gpsimd", shape, "broadcast_to")
        return Value(data, v.dtype, v.buffer)

    def __iadd__(self, other):
        o = as_value(other, "+=")
        if self.tensor.buffer != "psum":
            raise HardwareError(f"+= into {self.tensor!r}: accumulation happens in PSUM")
        return Value(self.read() + o.data, "float32", "psum", None, "matmul")

    @property
    def buffer(self):
        return self.tensor.buffer

    @property
    def dtype(self):
        return self.tensor.dtype


@dataclass
class Value:
    """An on-chip tile produced by an instruction (float32 math, ``dtype`` its declared type)."""

    data: np.ndarray
    dtype: str
    buffer: str
    mask: object = None
    produced_by: str = ""

    @property
    def shape(self):
        return self.data.shape


def as_value(x, what) -> Value:
    if isinstance(x, Value):
        return x
    if isinstance(x, View):
        if x.tensor.buffer == "hbm":
            raise HardwareError(f"{what}: operand {x.tensor!r} is in HBM; compute reads SBUF/PSUM tiles "
                                "(nl.load it first)")
        return Value(x.read(), x.tensor.dtype, x.tensor.buffer)
    if isinstance(x, Tensor):
        return as_value(x[...], what)
    if isinstance(x, (int, float, np.floating)):
        return Value(np.float32(x), "float32", "const")
    raise HardwareError(f"{what}: operand of type {type(x).__name__} is not an NKI tile")


def _round(data, dtype):
    """Values as stored in ``dtype`` (rounding), returned as float32."""
    return np.asarray(data).astype(_np_dtype(dtype)).astype(np.float32)


# --------------------------------------------------------------------------------------------
# the machine: allocation rules and the NKI calls


class Machine:
    """One NeuronCore: allocations by name, the cost record, and the NKI calls bound to them."""

    def __init__(self, numerics: bool = True, core: hw.Core = hw.TRN1):
        self.numerics = numerics   # False: TensorE results are zeros (cost-model runs of big shapes)
        self.core = core           # the NeuronCore generation whose rules and rates apply
        self.cost = Cost(peak_flops=core.tensore_peak_flops)
        self.alloc = {}        # name -> (buffer, bytes per partition)

    # -- allocation ------------------------------------------------------------------------
    def allocate(self, call, shape, dtype, buffer, name, fill):
        dtype = _dtype_name(dtype)
        shape = tuple(int(s) for s in shape)
        if buffer in ("sbuf", "psum"):
            if shape[0] > self.core.pmax:
                raise HardwareError(f"{call} {name}: partition dimension {shape[0]} > {self.core.pmax} partitions")
            per = prod(shape[1:]) * hw.DTYPE_BYTES[dtype]
            if buffer == "psum" and dtype != "float32":
                raise HardwareError(f"{call} {name}: PSUM tiles hold float32 accumulators, got {dtype}")
            if name:                 # unnamed tiles are temporaries of one statement
                self.alloc[name] = (buffer, per)
                self._check_capacity(call, name)
        return Tensor(self, shape, dtype, buffer, name, fill=fill)

    def _check_capacity(self, call, name):
        c = self.core
        sb = sum(b for k, (buf, b) in self.alloc.items() if buf == "sbuf")
        if sb > c.sbuf_partition_bytes:
            raise HardwareError(f"{call} {name}: SBUF needs {sb} bytes per partition > {c.sbuf_partition_bytes} "
                                f"({c.name})")
        ps = [b for k, (buf, b) in self.alloc.items() if buf == "psum"]
        if sum(ps) > c.psum_partition_bytes:
            raise HardwareError(f"{call} {name}: PSUM needs {sum(ps)} bytes per partition > {c.psum_partition_bytes}")
        banks = sum(ceil(b / c.psum_bank_bytes) for b in ps)
        if banks > c.psum_banks:
            raise HardwareError(f"{call} {name}: PSUM tiles need {banks} banks > {c.psum_banks}")

    # -- DMA ------------------------------------------------------------------------------
    def load(self, src, *, mask=None, dtype=None):
        if not isinstance(src, View) or src.tensor.buffer != "hbm":
            raise HardwareError(f"nl.load: src must be an HBM tensor (indexed), got {src!r}")
        if len(src.shape) < 1 or src.shape[0] > self.core.pmax:
            raise HardwareError(f"nl.load: tile of {src.shape[0]} partitions > {self.core.pmax} ({src.tensor!r})")
        out = dtype and _dtype_name(dtype) or src.tensor.dtype
        if src.fast is not None and not self.numerics:     # cost-only run: in bounds, skip the data
            data = np.zeros(src.shape, np.float32)
        else:
            data = src.read(mask)
        m = None if mask is None else src._mask(mask).reshape(data.shape)
        nbytes = int(data.size if m is None else m.sum()) * hw.DTYPE_BYTES[src.tensor.dtype]
        self._dma(nbytes, "nl.load")
        return Value(_round(data, out) if self.numerics else data, out, "sbuf", m, "load")

    def store(self, dst, value, *, mask=None):
        if not isinstance(dst, View) or dst.tensor.buffer != "hbm":
            raise HardwareError(f"nl.store: dst must be an HBM tensor (indexed), got {dst!r}")
        v = as_value(value, "nl.store value")
        if v.shape and v.shape[0] > self.core.pmax:
            raise HardwareError(f"nl.store: tile of {v.shape[0]} partitions > {self.core.pmax}")
        sel = dst._mask(mask)
        dst.put(v.data, mask)
        self._dma(int(sel.sum()) * hw.DTYPE_BYTES[dst.tensor.dtype], "nl.store")
        if v.buffer == "psum":   # [LOAD] a PSUM tile is first copied to SBUF
            self._engine("vector", v.shape, "psum->sbuf copy")

    def _dma(self, nbytes, what, efficiency=1.0):
        self.cost.dma_bytes += nbytes
        self.cost.charge("dma", nbytes / (self.core.hbm_bytes_per_s * efficiency) + self.core.dma_fixed_s, what)

    def _engine(self, engine, shape, what, inputs=1, rate=1):
        """Charge ``max(MIN_II, inputs·N / rate)`` cycles of ``engine`` for N elements per partition
        ([ARCH1]: one input tile ~N cycles, two ~2N; ``rate``: elements per lane per cycle)."""
        free = prod(shape[1:]) if len(shape) > 1 else 1
        cycles = max(inputs * int(free) / rate, self.core.min_instruction_cycles)
        self.cost.charge(engine, cycles / self.core.engine_hz[engine], what)

    def _tensore(self, n_moving, fp32_factor, what):
        """TensorE: ``max(MIN_II, N)`` cycles per instruction, N the moving free size ([ARCH1]
        MM_INIT_LATENCY), times the FP32 factor for FP32 data."""
        cycles = max(int(n_moving), self.core.min_instruction_cycles) * fp32_factor
        self.cost.charge("tensor", cycles * self.core.tensore_cycle_s, what)

    # -- TensorE --------------------------------------------------------------------------
    def nc_matmul(self, stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False,
                  is_transpose=False, tile_position=(), tile_size=(), mask=None):
        for nm, t in (("stationary", stationary), ("moving", moving)):
            if not isinstance(t, View) or t.tensor.buffer != "sbuf":
                raise HardwareError(f"nisa.nc_matmul: {nm} must be an SBUF tile, got {t!r}")
            if t.tensor.dtype not in hw.MATMUL_IN_DTYPES:
                raise HardwareError(f"nisa.nc_matmul: {nm} dtype {t.tensor.dtype} not in {hw.MATMUL_IN_DTYPES}")
            if len(t.shape) != 2:
                raise HardwareError(f"nisa.nc_matmul: {nm} must be a 2-D tile [partition, free], got {t.shape}")
        (k1, m), (k2, n) = stationary.shape, moving.shape
        if stationary.tensor.dtype != moving.tensor.dtype:
            raise HardwareError(f"nisa.nc_matmul: stationary {stationary.tensor.dtype} and moving "
                                f"{moving.tensor.dtype} must share a dtype")
        c = self.core
        if k1 != k2 or k1 > c.matmul_contraction:
            raise HardwareError(f"nisa.nc_matmul: contraction (partition) sizes {k1} and {k2} must be equal "
                                f"and <= {c.matmul_contraction}")
        if m > c.matmul_stationary_free:
            raise HardwareError(f"nisa.nc_matmul: stationary free size {m} > {c.matmul_stationary_free}")
        if n > c.matmul_moving_free:
            raise HardwareError(f"nisa.nc_matmul: moving free size {n} > {c.matmul_moving_free}")
        self.cost.flops += 2.0 * k1 * m * n
        fp32 = c.fp32_matmul_factor if stationary.tensor.dtype == "float32" else 1.0
        self._tensore(n, fp32, "nisa.nc_matmul")
        if not self.numerics:
            return Value(np.zeros((m, n), np.float32), "float32", "psum", None, "matmul")
        a, b = stationary.read(), moving.read()
        # fp32 products and sums, as PSUM (einsum: no BLAS threads to fight over on small tiles)
        return Value(np.einsum("km,kn->mn", a, b), "float32", "psum", None, "matmul")

    def nc_transpose(self, data, *, mask=None, dtype=None, engine=None):
        if not isinstance(data, View) or data.tensor.buffer != "sbuf":
            raise HardwareError(f"nisa.nc_transpose: TensorE reads its input from SBUF, got {data!r}")
        p, f = data.shape
        pmax = self.core.pmax
        if p > pmax or f > pmax:
            raise HardwareError(f"nisa.nc_transpose: TensorE transposes at most {pmax}x{pmax}, got {p}x{f}")
        self._tensore(p, self.core.fp32_transpose_factor if data.tensor.dtype == "float32" else 1.0,
                      "nisa.nc_transpose")
        return Value(data.read().T.copy(), "float32", "psum", None, "matmul")


# --------------------------------------------------------------------------------------------
# elementwise and reductions (nki.language), charged to VectorE / ScalarE


def _operands(what, *xs):
    vals = [as_value(x, what) for x in xs]
    shapes = [v.shape for v in vals if v.buffer != "const"]
    parts = {s[0] for s in shapes if len(s)}
    if len(parts) > 1:
        raise HardwareError(f"{what}: operands have partition sizes {sorted(parts)}; NKI broadcasts along "
                            "the free dimension only")
    return vals


def _out_dtype(vals, dtype):
    if dtype is not None:
        return _dtype_name(dtype)
    names = [v.dtype for v in vals if v.buffer != "const"] or ["float32"]
    return "float32" if "float32" in names else names[0]


def _unary(machine, fn, engine, name):
    def op(x, *, dtype=None, mask=None):
        (v,) = _operands(f"nl.{name}", x)
        out = _out_dtype([v], dtype)
        machine._engine(engine, v.shape, f"nl.{name}")
        return Value(_round(fn(v.data), out), out, "sbuf")
    op.__name__ = name
    op.numpy = fn          # what nisa.activation applies when given this function as its op
    return op


def _activation(machine):
    def activation(op, data, *, bias=None, scale=1.0, mask=None, dtype=None):
        """[ISA] nki.isa.activation: op(data * scale + bias) on ScalarE, float32 math."""
        if not hasattr(op, "numpy"):
            raise HardwareError(f"nisa.activation: op {op!r} is not an nki.language activation function")
        (v,) = _operands("nisa.activation", data)
        if not isinstance(scale, (int, float)):
            raise HardwareError("nisa.activation: the model supports a compile-time scalar scale only")
        x = v.data * np.float32(scale)
        if bias is not None:
            (b,) = _operands("nisa.activation bias", bias)
            if b.shape != (v.shape[0], 1):
                raise HardwareError(f"nisa.activation: bias must be a ({v.shape[0]}, 1) vector, got {b.shape}")
            x = x + b.data
        out = _out_dtype([v], dtype) if dtype is not None else v.dtype
        machine._engine("scalar", v.shape, "nisa.activation")
        return Value(_round(op.numpy(x), out), out, "sbuf")
    return activation


def _binary(machine, fn, name):
    def op(x, y, *, dtype=None, mask=None):
        vals = _operands(f"nl.{name}", x, y)
        out = _out_dtype(vals, dtype)
        shape = np.broadcast_shapes(*[np.shape(v.data) for v in vals])
        tiles = [v for v in vals if v.buffer != "const" and tuple(v.shape) == tuple(shape)]
        machine._engine("vector", shape, f"nl.{name}", inputs=len(tiles) if len(tiles) == 2 else 1)
        return Value(_round(fn(vals[0].data, vals[1].data), out), out, "sbuf")
    op.__name__ = name
    return op


def _reduce(machine, fn, name):
    def op(x, axis, *, dtype=None, mask=None, keepdims=False):
        (v,) = _operands(f"nl.{name}", x)
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        if 0 in axes:
            raise HardwareError(f"nl.{name}: axis 0 is the partition dimension; VectorE reduces along the "
                                "free dimension (transpose first, or reduce on TensorE)")
        out = _out_dtype([v], dtype)
        machine._engine("vector", v.shape, f"nl.{name}")
        return Value(_round(fn(v.data, axis=axes, keepdims=keepdims), out), out, "sbuf")
    op.__name__ = name
    return op


def _copy(machine):
    def copy(src, *, mask=None, dtype=None):
        (v,) = _operands("nl.copy", src)
        out = _out_dtype([v], dtype) if dtype is not None else v.dtype
        machine._engine("vector", v.shape, "nl.copy")
        return Value(_round(v.data, out), out, "sbuf")
    return copy


class _Mgrid:
    """``nl.mgrid[0:p, 0:f]``: index grids of shapes (p, 1) and (1, f)."""

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        return np.ogrid[key]


def language_module(machine: Machine, module_name: str):
    """What both NKI generations' ``nki.language`` share, bound to ``machine``: dtypes, buffers,
    ``ndarray`` (NaN: uninitialised), ``zeros``, and the loop hints (the model runs loops as Python
    loops; NKI 0.2 unrolls them at compile time, NKI 0.1 traces them)."""
    nl = types.ModuleType(module_name)
    for name in ("float16", "bfloat16", "float32", "int32"):
        setattr(nl, name, name)
    nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm = "sbuf", "psum", "hbm", "hbm"

    def ndarray(shape, dtype, buffer=None, name=""):
        return machine.allocate("nl.ndarray", shape, dtype, buffer or "sbuf", name, np.nan)

    def zeros(shape, dtype, buffer=None, name=""):
        return machine.allocate("nl.zeros", shape, dtype, buffer or "sbuf", name, 0.0)

    def affine_range(start, stop=None, step=1):
        return range(start, stop, step) if stop is not None else range(start)

    def sequential_range(start, stop, step):
        return range(start, stop, step)

    nl.ndarray, nl.zeros, nl.affine_range, nl.sequential_range = ndarray, zeros, affine_range, sequential_range
    return nl


def namespace(machine: Machine):
    """The fake ``neuronxcc`` package (NKI 0.1, trn1) bound to ``machine``: ``{module name: module}``."""
    nl = language_module(machine, "neuronxcc.nki.language")

    def full(shape, fill_value, dtype, buffer=None, name=""):
        return machine.allocate("nl.full", shape, dtype, buffer or "sbuf", name, float(fill_value))

    nl.full = full
    nl.mgrid = _Mgrid()
    nl.load, nl.store = machine.load, machine.store
    nl.copy = _copy(machine)
    for name, fn, eng in (("exp", np.exp, "scalar"), ("log", np.log, "scalar"), ("sqrt", np.sqrt, "scalar"),
                          ("rsqrt", lambda a: 1.0 / np.sqrt(a), "scalar"), ("negative", np.negative, "vector"),
                          ("abs", np.abs, "vector"), ("reciprocal", lambda a: 1.0 / a, "vector")):
        setattr(nl, name, _unary(machine, fn, eng, name))
    for name, fn in (("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                     ("divide", np.divide), ("maximum", np.maximum), ("minimum", np.minimum)):
        setattr(nl, name, _binary(machine, fn, name))
    for name, fn in (("max", np.max), ("min", np.min), ("sum", np.sum)):
        setattr(nl, name, _reduce(machine, fn, name))

    isa = types.ModuleType("neuronxcc.nki.isa")
    isa.nc_matmul, isa.nc_transpose = machine.nc_matmul, machine.nc_transpose

    def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None):
        (v,) = _operands("nisa.affine_select", on_true_tile)
        if not isinstance(on_false_value, (int, float)):
            raise HardwareError("nisa.affine_select: on_false_value must be a compile-time constant scalar")
        sel = np.broadcast_to(np.asarray(pred, dtype=bool), v.shape)
        out = _out_dtype([v], dtype) if dtype is not None else v.dtype
        # [ISA affine_select]: "150 + N GpSimd Engine cycles", N elements per partition
        machine.cost.charge("gpsimd", (150 + prod(v.shape[1:])) / machine.core.engine_hz["gpsimd"],
                            "nisa.affine_select")
        return Value(_round(np.where(sel, v.data, np.float32(on_false_value)), out), out, "sbuf")

    isa.affine_select = affine_select
    isa.activation = _activation(machine)

    nki = types.ModuleType("neuronxcc.nki")
    nki.jit = jit
    nki.language, nki.isa = nl, isa
    root = types.ModuleType("neuronxcc")
    root.nki = nki
    for mod in (nl, isa, nki):
        api_module(mod, "neuronxcc.nki (NKI 0.1, trn1)", NKI2_NAMES, "the nki.* API (NKI 0.2+, trn2)")
    return {"neuronxcc": root, "neuronxcc.nki": nki, "neuronxcc.nki.language": nl, "neuronxcc.nki.isa": isa}


def jit(fn=None, **kw):
    """``@nki.jit``: the model calls the kernel function itself."""
    return fn if fn is not None else (lambda f: f)


#: names of the other API, for the refusal's hint: trn2-only calls in a trn1 source, and back
NKI2_NAMES = {"dma_copy", "dma_transpose", "tensor_copy", "tensor_tensor", "tensor_scalar", "tensor_reduce",
              "memset", "reciprocal"}
NKI1_NAMES = {"load", "store", "mgrid", "max", "min", "sum", "divide", "negative", "full"}


def api_module(mod, api: str, foreign: set, other: str):
    """Make ``mod`` (one module of a fake NKI package) strict: every public function checks its
    arguments against its own signature, and a name the module lacks raises
    :class:`HardwareError` naming the API — with ``other`` as the hint when ``foreign`` holds it
    (a call of the other NKI generation's spelling)."""
    import inspect
    short = {"language": "nl", "isa": "nisa"}.get(mod.__name__.rsplit(".", 1)[-1], "nki")
    for name, fn in list(vars(mod).items()):
        if not name.startswith("_") and (inspect.isfunction(fn) or inspect.ismethod(fn)):
            setattr(mod, name, _bound(f"{short}.{name}", api, fn))

    def missing(name):
        if name.startswith("_"):
            raise AttributeError(name)
        hint = f"; it belongs to {other}" if name in foreign else ""
        raise HardwareError(f"{short}.{name} is not in {api} as this model runs it{hint}")
    mod.__getattr__ = missing


def _bound(label, api, fn):
    """``fn`` that first binds its arguments (an argument list of another signature — the other
    NKI generation's spelling — is a :class:`HardwareError` naming the documented one)."""
    import functools
    import inspect
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            sig.bind(*args, **kwargs)
        except TypeError as err:
            raise HardwareError(f"{label}{sig} in {api}: {err}") from None
        return fn(*args, **kwargs)
    return call
