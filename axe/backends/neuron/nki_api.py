"""The NKI API reference for the calls axe emits, re-typed from AWS's documentation as data.

:data:`CALLS`: the documented signatures of the trn1-era ``neuronxcc.nki`` API (Neuron SDK
2.21-2.26 reference pages, "relevant for Inf2, Trn1, Trn2"), positional parameters, then
keyword-only ones; ``**kwargs`` is not listed (axe passes no undocumented keyword).  Base URL:
https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/generated/<name>.html

:data:`NKI2_CALLS`: the ``nki.*`` API (NKI 0.2.0 in Neuron 2.27/2.28 through NKI 0.6.0 in 2.32)
that trn2 builds emit: each signature is the parameters common to the 2.27.0 and 2.32.0 reference
(read from the documentation sources, aws-neuron/aws-neuron-sdk ``nki/api/nki/isa/__init__.py``
and ``nki/api/nki/language/__init__.py`` at tags v2.27.0 and v2.32.0; pages
https://awsdocs-neuron.readthedocs-hosted.com/en/v2.27.0/nki/api/generated/nki.isa.<name>.html).
Where the two differ, the common part is kept and axe passes those arguments by keyword
(``dma_copy``: 2.27 has ``dst_rmw_op`` third, 2.29+ ``engine``; ``nc_matmul``: 2.29+ adds
``accumulate``, which axe leaves to its default).

``tests/test_neuron_api.py`` parses every source the backend emits and binds each call to the
table of its target, and checks that the model implements the same signatures, so emitted code
names only documented functions and arguments.
"""

from __future__ import annotations

__all__ = ["CALLS", "ATTRIBUTES", "TILE_METHODS", "NKI2_CALLS", "NKI2_ATTRIBUTES", "API", "signature"]

# name: (positional-or-keyword parameters with defaults marked "=", keyword-only parameters)
CALLS = {
    # nki.language: creation, iterators
    "nl.ndarray": (("shape", "dtype", "buffer=", "name="), ()),
    "nl.zeros": (("shape", "dtype", "buffer=", "name="), ()),
    "nl.affine_range": (("start", "stop=", "step="), ()),
    "nl.sequential_range": (("start", "stop", "step"), ()),
    # nki.language: memory
    "nl.load": (("src",), ("mask", "dtype")),
    "nl.store": (("dst", "value"), ("mask",)),
    "nl.copy": (("src",), ("mask", "dtype")),
    # nki.language: math (element-wise: x[, y], then dtype and mask keyword-only)
    "nl.exp": (("x",), ("dtype", "mask")),
    "nl.log": (("x",), ("dtype", "mask")),
    "nl.sqrt": (("x",), ("dtype", "mask")),
    "nl.rsqrt": (("x",), ("dtype", "mask")),
    "nl.abs": (("x",), ("dtype", "mask")),
    "nl.negative": (("x",), ("dtype", "mask")),
    "nl.add": (("x", "y"), ("dtype", "mask")),
    "nl.subtract": (("x", "y"), ("dtype", "mask")),
    "nl.multiply": (("x", "y"), ("dtype", "mask")),
    "nl.divide": (("x", "y"), ("dtype", "mask")),
    "nl.maximum": (("x", "y"), ("dtype", "mask")),
    "nl.minimum": (("x", "y"), ("dtype", "mask")),
    # nki.language: reductions (axis must be free dims)
    "nl.max": (("x", "axis"), ("dtype", "mask", "keepdims")),
    "nl.min": (("x", "axis"), ("dtype", "mask", "keepdims")),
    "nl.sum": (("x", "axis"), ("dtype", "mask", "keepdims")),
    # nki.isa
    "nisa.nc_matmul": (("stationary", "moving"), ("is_stationary_onezero", "is_moving_onezero", "is_transpose",
                                                  "tile_position", "tile_size", "mask")),
    "nisa.nc_transpose": (("data",), ("mask", "dtype", "engine")),
    "nisa.affine_select": (("pred", "on_true_tile", "on_false_value"), ("mask", "dtype")),
    "nisa.activation": (("op", "data"), ("bias", "scale", "mask", "dtype")),
}

# methods of a tile (nki.tensor): broadcast_to(shape) repeats a one-partition tile on more partitions
TILE_METHODS = {"broadcast_to": (("shape",), ())}

# names used as values (not called): dtypes, buffers, the index-grid object, the decorator, and
# activation functions passed to nisa.activation
ATTRIBUTES = {"nl.float16", "nl.bfloat16", "nl.float32", "nl.sbuf", "nl.psum", "nl.shared_hbm", "nl.mgrid",
              "nki.jit", "nl.exp"}


# nki.* (NKI 0.2+): every instruction writes dst, its first parameter [v2.27.0 nki.isa.*]
NKI2_CALLS = {
    "nl.ndarray": (("shape", "dtype", "buffer=", "name="), ()),
    "nl.zeros": (("shape", "dtype", "buffer=", "name="), ()),
    "nl.affine_range": (("start", "stop=", "step="), ()),
    "nl.sequential_range": (("start", "stop", "step"), ()),          # 2.29+ gives stop and step defaults
    "nisa.dma_copy": (("dst", "src", "oob_mode=", "dge_mode=", "name="), ()),
    "nisa.dma_transpose": (("dst", "src", "axes=", "dge_mode=", "name="), ()),
    "nisa.tensor_copy": (("dst", "src", "engine=", "name="), ()),
    "nisa.memset": (("dst", "value", "engine=", "name="), ()),
    "nisa.tensor_tensor": (("dst", "data1", "data2", "op", "engine=", "name="), ()),
    "nisa.tensor_scalar": (("dst", "data", "op0", "operand0", "reverse0=", "op1=", "operand1=", "reverse1=",
                            "engine=", "name="), ()),
    "nisa.tensor_reduce": (("dst", "op", "data", "axis", "negate=", "keepdims=", "name="), ()),
    "nisa.activation": (("dst", "op", "data", "bias=", "scale=", "reduce_op=", "reduce_res=", "reduce_cmd=",
                         "name="), ()),
    "nisa.reciprocal": (("dst", "data", "name="), ()),
    "nisa.nc_matmul": (("dst", "stationary", "moving", "is_stationary_onezero=", "is_moving_onezero=",
                        "is_transpose=", "tile_position=", "tile_size=", "perf_mode=", "name="), ()),
    "nisa.nc_transpose": (("dst", "data", "engine=", "name="), ()),
    # 2.27 orders (dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value, cmp_op), 2.32
    # (dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op, offset=0): axe passes all by keyword
    "nisa.affine_select": (("dst", "pattern", "offset", "channel_multiplier", "on_true_tile", "on_false_value",
                            "cmp_op=", "name="), ()),
}

# operator tokens (op= of the instructions: tbl-aluop and tbl-act-func of "NKI API Common Fields"),
# dtypes, buffers and the decorator
NKI2_ATTRIBUTES = {"nl.float16", "nl.bfloat16", "nl.float32", "nl.sbuf", "nl.psum", "nl.shared_hbm", "nki.jit",
                   "nl.add", "nl.subtract", "nl.multiply", "nl.maximum", "nl.minimum",
                   "nl.exp", "nl.log", "nl.sqrt", "nl.rsqrt", "nl.abs", "nl.greater_equal"}

#: target -> (calls, attributes, tile methods) of the API its sources are written in
API = {"trn1": (CALLS, ATTRIBUTES, TILE_METHODS), "trn2": (NKI2_CALLS, NKI2_ATTRIBUTES, {})}


def signature(name: str, target: str = "trn1"):
    """The documented signature of ``name`` in ``target``'s NKI API as an :class:`inspect.Signature`."""
    import inspect
    calls, _, methods = API[target]
    pos, kw = calls[name] if name in calls else methods[name]
    P = inspect.Parameter
    params = [P(p.rstrip("="), P.POSITIONAL_OR_KEYWORD, default=None if p.endswith("=") else P.empty) for p in pos]
    params += [P(k, P.KEYWORD_ONLY, default=None) for k in kw]
    return inspect.Signature(params)
