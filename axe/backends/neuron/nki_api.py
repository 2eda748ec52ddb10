"""The NKI API reference for the calls axe emits, re-typed from AWS's documentation as data.

Each entry: the documented signature of the trn1-era ``neuronxcc.nki`` API (Neuron SDK 2.21-2.26
reference pages, "relevant for Inf2, Trn1, Trn2"), positional parameters, then keyword-only
ones; ``**kwargs`` is not listed (axe passes no undocumented keyword).  ``tests/test_neuron_api.py``
parses every source the backend emits and binds each call to these signatures, so emitted code
names only documented functions and arguments.  Base URL:
https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/generated/<name>.html
"""

from __future__ import annotations

__all__ = ["CALLS", "ATTRIBUTES", "TILE_METHODS", "signature"]

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


def signature(name: str):
    """The documented signature of ``name`` as an :class:`inspect.Signature`."""
    import inspect
    pos, kw = CALLS[name] if name in CALLS else TILE_METHODS[name]
    P = inspect.Parameter
    params = [P(p.rstrip("="), P.POSITIONAL_OR_KEYWORD, default=None if p.endswith("=") else P.empty) for p in pos]
    params += [P(k, P.KEYWORD_ONLY, default=None) for k in kw]
    return inspect.Signature(params)
