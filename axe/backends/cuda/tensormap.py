"""TMA tensor maps: check a launch.json spec and encode a ``CUtensorMap`` for one tensor.

A spec (one entry of ``launch["tensormaps"]``) names the ``CUtensorMap`` kernel parameter, the
tensor argument it describes, and the tiled-mode fields of ``cuTensorMapEncodeTiled``, all
innermost dimension first::

    {"param": "A_map", "tensor": "A", "dtype": "float16",
     "shape": [64, 256] | None,          # None: the tensor's shape, reversed
     "strides_bytes": [128] | None,      # dims 1..rank-1; None: the tensor's strides, reversed
     "box": [64, 64], "elem_strides": [1, 1],
     "swizzle": 0 | 32 | 64 | 128, "interleave": 0, "l2_promotion": 0 | 64 | 128 | 256,
     "oob_fill": "zero" | "nan"}

The checks mirror the driver's documented requirements so that a bad spec fails with the field
named instead of ``CUDA_ERROR_INVALID_VALUE``.  This module imports neither torch nor
``cuda.bindings``: :func:`encode` takes the driver module as an argument (tests pass a fake).
It is the CUDA backend's, pure, so that the TMA schedules (packed strides), the build (spec
checks) and the runtime (encoding at launch) share one statement of the rules without the
schedules importing the runtime.
"""

from __future__ import annotations

#: tensor dtype -> (CUtensorMapDataType suffix, bytes per element)
DTYPES = {
    "uint8": ("UINT8", 1),
    "int8": ("UINT8", 1),
    "bool": ("UINT8", 1),
    "float8_e4m3fn": ("UINT8", 1),
    "float8_e5m2": ("UINT8", 1),
    "uint16": ("UINT16", 2),
    "int16": ("UINT16", 2),
    "uint32": ("UINT32", 4),
    "int32": ("INT32", 4),
    "uint64": ("UINT64", 8),
    "int64": ("INT64", 8),
    "float16": ("FLOAT16", 2),
    "bfloat16": ("BFLOAT16", 2),
    "float32": ("FLOAT32", 4),
    "float64": ("FLOAT64", 8),
}

_SWIZZLE = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}
_L2 = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}
_OOB = {"zero": "NONE", "nan": "NAN_REQUEST_ZERO_FMA"}


class TensorMapError(ValueError):
    """A tensor-map spec, or the tensor it is encoded for, breaks a TMA requirement."""


def _fail(spec, msg):
    raise TensorMapError(f"tensormap {spec.get('param', '?')!r} (tensor {spec.get('tensor', '?')!r}): {msg}")


def check_spec(spec: dict) -> None:
    """Check the tensor-independent TMA rules of a spec; raise :class:`TensorMapError`."""
    dtype = spec.get("dtype")
    if dtype not in DTYPES:
        _fail(spec, f"dtype {dtype!r} has no TMA data type; supported: {sorted(DTYPES)}")
    esize = DTYPES[dtype][1]
    box = spec.get("box") or []
    rank = len(box)
    if not 1 <= rank <= 5:
        _fail(spec, f"rank {rank} (len(box)) must be 1..5")
    es = spec.get("elem_strides") or []
    if len(es) != rank:
        _fail(spec, f"elem_strides {es} must have {rank} entries (one per box dim)")
    if spec.get("shape") is not None and len(spec["shape"]) != rank:
        _fail(spec, f"shape {spec['shape']} must have {rank} entries (innermost first)")
    if spec.get("strides_bytes") is not None and len(spec["strides_bytes"]) != rank - 1:
        _fail(spec, f"strides_bytes {spec['strides_bytes']} must have {rank - 1} entries (dims 1..rank-1)")
    for i, b in enumerate(box):
        if not 1 <= b <= 256:
            _fail(spec, f"box[{i}] = {b} must be in 1..256")
    for i, e in enumerate(es):
        if not 1 <= e <= 8:
            _fail(spec, f"elem_strides[{i}] = {e} must be in 1..8")
    if spec.get("interleave", 0) != 0:
        _fail(spec, f"interleave {spec['interleave']} is not supported (only 0, no interleave)")
    swizzle = spec.get("swizzle", 0)
    if swizzle not in _SWIZZLE:
        _fail(spec, f"swizzle {swizzle} must be one of {sorted(_SWIZZLE)}")
    if spec.get("l2_promotion", 0) not in _L2:
        _fail(spec, f"l2_promotion {spec['l2_promotion']} must be one of {sorted(_L2)}")
    if spec.get("oob_fill", "zero") not in _OOB:
        _fail(spec, f"oob_fill {spec['oob_fill']!r} must be one of {sorted(_OOB)}")
    inner = box[0] * esize
    if inner % 16:
        _fail(spec, f"box[0] * {esize} bytes = {inner} bytes must be a multiple of 16")
    if swizzle and inner > swizzle:
        _fail(spec, f"box[0] * {esize} bytes = {inner} bytes exceeds the {swizzle}-byte swizzle span")
    if spec.get("strides_bytes") is not None:
        bad = stride_violation(spec["strides_bytes"], esize, spec.get("shape"))
        if bad:
            i, why = bad
            _fail(spec, f"strides_bytes[{i}] = {spec['strides_bytes'][i]} {why}")


def packed_strides(dims, strides_bytes, esize: int) -> list:
    """``strides_bytes`` (of dimensions 1..rank-1, innermost first) with the stride of every
    extent-1 dimension replaced by the packed one: the bytes the dimension inside it spans
    (``esize * dims[0]`` for dimension 1, ``stride * extent`` of the dimension inside further out),
    rounded up to a multiple of 16.  Other strides are returned unchanged.

    An extent-1 dimension is read at coordinate 0 only, so its stride never moves an address, and
    the layout algebra gives it no iter (stride 0); but the driver checks every stride
    (:func:`stride_violation`), and the packed stride is the driver's own model of a tensor with no
    padding — as torch strides a contiguous tensor's size-1 dimension.  Where the real strides nest,
    the result nests too (a stride further out is a multiple of 16 at least as large as the span).
    """
    out, inner = [], esize
    for i, s in enumerate(strides_bytes, start=1):
        if dims[i] == 1:
            s = -(-inner * dims[i - 1] // 16) * 16
        out.append(int(s))
        inner = s
    return out


def stride_violation(strides_bytes, esize: int, dims=None):
    """``(i, reason)`` for the first byte stride (``strides_bytes[i]``, of dimension i + 1) that
    breaks ``cuTensorMapEncodeTiled``'s documented rules, or None.

    Each stride is a multiple of 16 in 1..2**40 - 1 and, where the extents ``dims`` (innermost
    first) are known, spans the dimension inside it: ``stride[0] >= dims[0] * esize`` and
    ``stride[i] >= stride[i - 1] * dims[i]`` (cuda.h: "each following dimension specified includes
    previous dimension stride", ``globalStrides[i] = globalStrides[i - 1] * (globalDim[i] +
    padding[i])``).
    """
    inner = esize
    for i, s in enumerate(strides_bytes):
        if s % 16 or not 0 < s < 2**40:
            return i, "must be a positive multiple of 16 below 2**40"
        if dims is not None and s < inner * dims[i]:
            return i, (f"is below the {inner * dims[i]} bytes of dimension {i} inside it (extent {dims[i]} x "
                       f"stride {inner}): TMA dimensions nest, innermost first")
        inner = s
    return None


def tiled_args(spec: dict, ptr: int, shape, strides, element_size: int, dtype: str):
    """The ``cuTensorMapEncodeTiled`` operands for a tensor, innermost dimension first.

    ``shape`` and ``strides`` (in elements) are the tensor's, outermost first, as torch gives
    them.  Returns ``(dims, strides_bytes, box, elem_strides)``; raises :class:`TensorMapError`
    where the tensor breaks a rule (alignment, stride multiple, extent beyond the tensor).
    """
    check_spec(spec)
    if dtype != spec["dtype"] and DTYPES.get(dtype, (None, 0))[1] != DTYPES[spec["dtype"]][1]:
        _fail(spec, f"tensor dtype {dtype} has another element size than spec dtype {spec['dtype']}")
    if ptr % 16:
        _fail(spec, f"global address 0x{ptr:x} is not 16-byte aligned")
    rank = len(spec["box"])
    if spec.get("shape") is not None:
        dims = [int(x) for x in spec["shape"]]
    else:
        if len(shape) != rank:
            _fail(spec, f"tensor has rank {len(shape)} but the spec's box has rank {rank}")
        dims = [int(x) for x in reversed(list(shape))]
    if spec.get("strides_bytes") is not None:
        sb = [int(x) for x in spec["strides_bytes"]]
    else:
        if len(strides) != rank:
            _fail(spec, f"tensor has rank {len(strides)} but the spec's box has rank {rank}")
        rs = [int(x) for x in reversed(list(strides))]
        if rs[0] != 1:
            _fail(spec, f"the tensor's innermost stride is {rs[0]}; TMA needs it to be 1")
        sb = packed_strides(dims, [s * element_size for s in rs[1:]], element_size)
    for i, d in enumerate(dims):
        if not 0 < d <= 2**32:
            _fail(spec, f"dim {i} = {d} must be in 1..2**32")
    bad = stride_violation(sb, element_size, dims)
    if bad:
        i, why = bad
        _fail(spec, f"byte stride of dim {i + 1} = {sb[i]} {why}")
    # the described region must lie inside the tensor's own storage
    span = element_size * (1 + sum((d - 1) * s for d, s in zip(shape, strides)))
    need = element_size * dims[0] + sum((d - 1) * s for d, s in zip(dims[1:], sb))
    if need > span:
        _fail(spec, f"the map covers {need} bytes but the tensor spans only {span} bytes")
    return dims, sb, list(spec["box"]), list(spec["elem_strides"])


def encode(spec: dict, ptr: int, shape, strides, element_size: int, dtype: str, driver):
    """Encode the ``CUtensorMap`` for a tensor with ``driver.cuTensorMapEncodeTiled``.

    ``driver`` is ``cuda.bindings.driver`` (or a stand-in with the same names).  Returns the
    driver's ``CUtensorMap`` object (its ``getPtr()`` is the address of the 128-byte map).
    """
    dims, sb, box, es = tiled_args(spec, ptr, shape, strides, element_size, dtype)
    d = driver
    result = d.cuTensorMapEncodeTiled(
        getattr(d.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + DTYPES[spec["dtype"]][0]),
        len(box),
        ptr,
        [d.cuuint64_t(x) for x in dims],
        [d.cuuint64_t(x) for x in sb],
        [d.cuuint32_t(x) for x in box],
        [d.cuuint32_t(x) for x in es],
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(d.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + _SWIZZLE[spec.get("swizzle", 0)]),
        getattr(d.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_" + _L2[spec.get("l2_promotion", 0)]),
        getattr(d.CUtensorMapFloatOOBfill, "CU_TENSOR_MAP_FLOAT_OOB_FILL_" + _OOB[spec.get("oob_fill", "zero")]),
    )
    err, tmap = result[0], result[1]
    if err != d.CUresult.CUDA_SUCCESS:
        _fail(
            spec,
            f"cuTensorMapEncodeTiled failed ({err}) for dims {dims}, strides_bytes {sb}, box {box}, "
            f"elem_strides {es}, swizzle {spec.get('swizzle', 0)}",
        )
    return tmap
