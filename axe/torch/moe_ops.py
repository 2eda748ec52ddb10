"""``torch.ops.axe.fused_moe``: the Mixture-of-Experts layer of ``kernels/moe.py`` as a
``torch.library`` op, with SGLang's and vLLM's ``fused_experts`` argument conventions.
Registered when this module is imported (``import axe.torch.moe_ops``).

``fused_moe(hidden_states, w1, w2, topk_weights, topk_ids, inplace=False, activation="silu",
apply_router_weight_on_input=False, global_num_experts=-1, expert_map=None) -> Tensor``:

- ``hidden_states`` (T, H) fp16/bf16; ``w1`` (E, 2I, H): each expert's gate rows then its up rows
  (``nn.Linear`` weights stacked, as SGLang and vLLM hold them); ``w2`` (E, H, I);
- ``topk_ids`` (T, top_k) int32 (int64 is converted), every id in ``[0, E)`` — not checked on the
  device (that would synchronize): an id outside it is undefined behaviour, as in the peers'
  kernels; ``topk_weights`` (T, top_k) fp32 (fp16/bf16 are converted);
- the law: ``out[t] = Σ_j topk_weights[t, j] · w2[e]·(SiLU(g) ⊙ u)``, ``e = topk_ids[t, j]``,
  ``(g, u) = (w1[e, :I]·x[t], w1[e, I:]·x[t])``; fp32 accumulation, the intermediate ``SiLU(g) ⊙ u``
  and each expert's output rounded to the dtype, the weighted sum in fp32, the result in the dtype;
- the other arguments take the values the kernel computes and are refused otherwise, naming the
  argument: ``inplace=True`` (write the result with ``hidden_states.copy_(out)``: an op whose
  output aliases an input needs another schema), another ``activation``, routing weights applied
  to the input, an ``expert_map`` (expert parallelism) or a ``global_num_experts`` other than E.

Kernels (``kernels/moe.py``, ``kernels/moe_gemm.py``), each built per model shape and serving every
T (the token count, the padded rows and the tile count are read at launch): the alignment (one
CTA, or many from :data:`SPLIT_FROM` tokens: ``make_align`` / ``make_align_split``), grouped
GEMM 1 gathering x's rows through the alignment's ``sorted_ids`` with SiLU·up in its epilogue,
grouped GEMM 2, and the weighted combine.  The tile configuration per T is
:func:`kernels.moe_host.config_for`'s (``tiny_gather`` for a few tokens — only where ``I`` is a
multiple of 48, else ``small_gather`` —, ``small_gather``, ``large_gather_sa``): at most 4 + 2 + 1
artifacts per (E, H, I, top_k, dtype), listed by :func:`specs`.

Shapes the kernels are built for (refused otherwise, naming the argument and the condition):
``E`` from 1 to 512 (the many-CTA alignment has 512 threads, one per expert); ``H`` a multiple of
64, at least 256 (GEMM 1 gathers x's rows by ``cp.async`` in whole k-blocks of 64 columns — one
128-byte swizzle panel —; GEMM 2's widest tile has 256 columns of H); ``I`` a multiple of 8, at
least 128 (h's rows are 16-byte multiples for TMA; GEMM 1's widest tile has 128 columns of I).
Tiles need not divide ``H``
or ``I``: the last column block and k-block of each GEMM reach past them, TMA zero-fills what they
load there and clips what they store (:func:`kernels.moe_gemm.check`); the combine's threads
cover a row exactly (:func:`kernels.moe.combine_split`); the alignment scans the experts rounded
up to a multiple of 32, the ones past E empty.  The k-block depth is the configuration's where it
fits (:func:`kernels.moe_host.fit_depth`).

Buffers are allocated per call through torch's allocator, so CUDA graphs capture the call (call it
once first: the first call of a configuration builds or loads its kernels).  The fake
implementation checks the arguments and gives ``(T, H)``, so ``torch.compile(fullgraph=True)``
traces through the op.
"""

from __future__ import annotations

import functools

import torch

from .jit import JitKernel
from .ops import ROOT, _define, _dtype, _ready, _same

__all__ = ["fused_moe", "KERNELS", "specs", "config", "check", "SPLIT_FROM"]

_INT32 = 2**31 - 1
#: the largest expert count the many-CTA alignment (512 threads, one per expert) takes
MAX_EXPERTS = 512
#: H a multiple of H_MULTIPLE (GEMM 1 gathers x's rows in whole k-blocks of 64 columns), at least
#: H_LEAST (GEMM 2's widest tile: 256 columns)
H_MULTIPLE, H_LEAST = 64, 256
#: I a multiple of I_MULTIPLE (16-byte rows of h for TMA), at least I_LEAST (GEMM 1's widest tile:
#: 128 SiLU·up columns)
I_MULTIPLE, I_LEAST = 8, 128
#: token counts from which the configuration aligns on many CTAs (kernels.moe_host.CONFIG_BY_TOKENS' last bound + 1)
SPLIT_FROM = 513


def _by_load(*args):
    raise TypeError("axe::fused_moe's kernels are launched through JitKernel.load(device, spec), not called")


#: the jit kernels behind the op (``loader``, ``cache`` and ``target`` may be replaced; tests replace ``load``)
KERNELS = {
    "align": JitKernel("kernels.moe:make_align", _by_load, path=ROOT),
    "align_split": JitKernel("kernels.moe:make_align_split", _by_load, path=ROOT),
    "gemm": JitKernel("kernels.moe:make_grouped_gemm", _by_load, path=ROOT),
    "combine": JitKernel("kernels.moe:make_combine", _by_load, path=ROOT),
}


_HOST = []


def _host():
    """``kernels.moe_host`` (no TVM), found where axe's kernels live (checkout or wheel); looked up once."""
    if not _HOST:
        from .cache import kernels_on_path
        kernels_on_path()
        from kernels import moe_host
        _HOST.append(moe_host)
    return _HOST[0]


def check(hidden_states, w1, w2, topk_weights, topk_ids, inplace=False, activation="silu",
          apply_router_weight_on_input=False, global_num_experts=-1, expert_map=None):
    """The op's conditions; returns ``(T, E, H, I, top_k, dtype name)`` or raises naming the
    argument and the failed condition."""
    op = "fused_moe"
    if inplace:
        raise ValueError("axe::fused_moe: inplace=True is not supported (the op returns a new tensor); "
                         "write it back with hidden_states.copy_(out)")
    if activation != "silu":
        raise ValueError(f"axe::fused_moe: activation={activation!r}; the kernel applies 'silu' (SiLU(gate) * up)")
    if apply_router_weight_on_input:
        raise ValueError("axe::fused_moe: apply_router_weight_on_input=True is not supported; the kernel weights "
                         "each expert's output in the combine")
    if expert_map is not None:
        raise ValueError("axe::fused_moe: expert_map is not supported (no expert parallelism): pass None")
    if hidden_states.dim() != 2:
        raise ValueError(f"axe::fused_moe: hidden_states must be (tokens, hidden), got shape {tuple(hidden_states.shape)}")
    dt = _dtype(op, "hidden_states", hidden_states)
    T, H = hidden_states.shape[0], int(hidden_states.shape[1])     # T stays symbolic under torch.compile
    if w1.dim() != 3 or w2.dim() != 3:
        raise ValueError(f"axe::fused_moe: w1 must be (E, 2*I, H) and w2 (E, H, I), got shapes {tuple(w1.shape)} "
                         f"and {tuple(w2.shape)}")
    E, two_i, H1 = (int(s) for s in w1.shape)
    I = int(w2.shape[2])
    if H1 != H:
        raise ValueError(f"axe::fused_moe: w1 has shape {tuple(w1.shape)}; its last dimension must be hidden_states' "
                         f"{H}")
    if two_i != 2 * I:
        raise ValueError(f"axe::fused_moe: w1 has {two_i} rows per expert, w2 has I={I} columns; w1 must stack "
                         f"gate and up rows, 2*I = {2 * I}")
    if tuple(w2.shape[:2]) != (E, H):
        raise ValueError(f"axe::fused_moe: w2 has shape {tuple(w2.shape)}, expected ({E}, {H}, {I}) (E from w1, "
                         "H from hidden_states)")
    _same(op, "w1", w1, hidden_states, "hidden_states", shape=False)
    _same(op, "w2", w2, hidden_states, "hidden_states", shape=False)
    for name, w in (("w1", w1), ("w2", w2)):
        if not w.is_contiguous():
            raise ValueError(f"axe::fused_moe: {name} is not contiguous (strides {w.stride()}); the kernel reads "
                             "each expert's rows by TMA and a weight is not copied per call")
    if global_num_experts not in (-1, E):
        raise ValueError(f"axe::fused_moe: global_num_experts={global_num_experts}, w1 holds E={E} experts; "
                         "without expert parallelism they must agree (or pass -1)")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T:
        raise ValueError(f"axe::fused_moe: topk_ids has shape {tuple(topk_ids.shape)}, expected ({T}, top_k)")
    top_k = int(topk_ids.shape[1])
    if not 1 <= top_k <= E:
        raise ValueError(f"axe::fused_moe: topk_ids has top_k={top_k} columns; it must be in [1, E={E}]")
    if tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise ValueError(f"axe::fused_moe: topk_weights has shape {tuple(topk_weights.shape)}, topk_ids has "
                         f"{tuple(topk_ids.shape)}; they must agree")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"axe::fused_moe: topk_ids has dtype {topk_ids.dtype}, expected int32 or int64")
    if topk_weights.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"axe::fused_moe: topk_weights has dtype {topk_weights.dtype}, expected float32 "
                        "(float16 and bfloat16 are converted)")
    for name, t in (("topk_ids", topk_ids), ("topk_weights", topk_weights)):
        if t.device != hidden_states.device:
            raise ValueError(f"axe::fused_moe: {name} is on {t.device}, hidden_states on {hidden_states.device}")
    if not 1 <= E <= MAX_EXPERTS:
        raise ValueError(f"axe::fused_moe: w1 holds E={E} experts; the many-CTA alignment takes at most "
                         f"{MAX_EXPERTS} (one thread per expert)")
    if H % H_MULTIPLE or H < H_LEAST:
        raise ValueError(f"axe::fused_moe: hidden_states has H={H} columns; it must be a multiple of {H_MULTIPLE} "
                         f"(GEMM 1 gathers x's rows in whole k-blocks of {H_MULTIPLE} columns: cp.async of 128-byte "
                         f"swizzle panels, no column bound) and at least {H_LEAST} (GEMM 2's widest tile)")
    if I % I_MULTIPLE or I < I_LEAST:
        raise ValueError(f"axe::fused_moe: w2 has I={I} columns (the intermediate size); it must be a multiple of "
                         f"{I_MULTIPLE} (16-byte rows of the intermediate for TMA) and at least {I_LEAST} "
                         f"(GEMM 1's widest tile)")
    # x (and out, its shape) is indexed element-wise with int32; the weights only through TMA's
    # per-dimension coordinates, so DeepSeek-V3's 7.5e9-element w1 is fine
    if hidden_states.numel() > _INT32:
        raise ValueError(f"axe::fused_moe: hidden_states has {hidden_states.numel()} elements; the kernels index it "
                         "with int32")
    return T, E, H, I, top_k, dt


def config(tokens: int, I: int) -> str:
    """The tile configuration (a name of ``kernels.moe_host.CONFIGS``) for ``tokens`` tokens:
    :func:`kernels.moe_host.config_for`'s, except ``tiny_gather`` (48 + 48-row GEMM 1 tiles) where
    I is not a multiple of 48, which runs ``small_gather``."""
    cfg = _host().config_for(tokens)
    return "small_gather" if cfg == "tiny_gather" and I % 48 else cfg


@functools.lru_cache(maxsize=256)
def specs(cfg: str, E: int, H: int, I: int, top_k: int, dtype: str) -> dict:
    """``{role: (name in KERNELS, factory keyword arguments)}`` of configuration ``cfg``: the
    alignment, GEMM 1 (``n = 2I``, ``k = H``, SiLU·up, gathering x's rows), GEMM 2 (``n = H``,
    ``k = I``) and the combine (memoized: do not modify the result)."""
    host = _host()
    kw = host.CONFIGS[cfg]
    g1, g2 = host.gemm_keywords(host.gemm_config(cfg))
    g1, g2 = host.fit_depth(g1, H, g1.get("gather_rows", False)), host.fit_depth(g2, I, False)
    align = {"bm": kw["bm"], "pad": kw.get("pad", kw["bm"]), "experts": E, "topk": top_k}
    return {"align": ("align_split" if kw.get("split_align") else "align", align),
            "gemm1": ("gemm", dict(n=2 * I, k=H, dtype=dtype, act="silu_mul", experts=E, **g1)),
            "gemm2": ("gemm", dict(n=H, k=I, dtype=dtype, experts=E, **g2)),
            "combine": ("combine", {"dtype": dtype, "hidden": H, "topk": top_k})}


def all_specs(E: int, H: int, I: int, top_k: int, dtype: str) -> list:
    """Every ``(name in KERNELS, spec)`` the op may launch for this shape, whatever T (each once,
    in the same order in every process)."""
    out = []
    for cfg in sorted({config(t, I) for t in (1, SPLIT_FROM - 1, SPLIT_FROM)}):
        for pair in specs(cfg, E, H, I, top_k, dtype).values():
            if pair not in out:
                out.append(pair)
    return out


def _fused_moe(hidden_states, w1, w2, topk_weights, topk_ids, inplace=False, activation="silu",
               apply_router_weight_on_input=False, global_num_experts=-1, expert_map=None):
    T, E, H, I, top_k, dt = check(hidden_states, w1, w2, topk_weights, topk_ids, inplace, activation,
                                  apply_router_weight_on_input, global_num_experts, expert_map)
    out = hidden_states.new_empty((T, H))
    if T == 0:
        return out
    _host()                     # kernels on sys.path
    from kernels.parts.schedulers.padding import capacity, tile_capacity
    if (capacity(T * top_k, E, 16) + 128) * max(H, I) > _INT32:
        raise ValueError(f"axe::fused_moe: T={T} tokens of top_k={top_k} make padded buffers of more than 2^31 "
                         "elements; the kernels index with int32")
    device = hidden_states.device
    cfg = config(T, I)
    roles = specs(cfg, E, H, I, top_k, dt)
    k = {role: KERNELS[name].load(device, spec) for role, (name, spec) in roles.items()}
    bm, pad = roles["align"][1]["bm"], roles["align"][1]["pad"]
    x = _ready(hidden_states)
    ids = topk_ids if topk_ids.dtype == torch.int32 else topk_ids.to(torch.int32)
    weights = topk_weights if topk_weights.dtype == torch.float32 else topk_weights.float()
    ids, weights = _ready(ids, 4), _ready(weights, 4)
    P, MT = capacity(T * top_k, E, pad), tile_capacity(T * top_k, E, bm)
    i32 = dict(dtype=torch.int32, device=device)
    # bm rows past the capacity: a tile may reach past the padded rows; the alignment writes -1 there
    sorted_ids, tiles, tile_rows = torch.empty(P + bm, **i32), torch.empty(MT, **i32), torch.empty(MT, 2, **i32)
    meta, pos = torch.zeros(4, **i32), torch.empty(T, top_k, **i32)
    h = hidden_states.new_empty((P, I))
    y = hidden_states.new_empty((P, H))
    grouped = (sorted_ids, tiles, tile_rows, meta)
    k["align"](ids, sorted_ids, tiles, tile_rows, meta, pos)
    k["gemm1"](x, w1, h, *grouped)
    k["gemm2"](h, w2, y, *grouped)
    k["combine"](y, pos, weights, out)
    return out


def _fused_moe_fake(hidden_states, w1, w2, topk_weights, topk_ids, inplace=False, activation="silu",
                    apply_router_weight_on_input=False, global_num_experts=-1, expert_map=None):
    T, _, H, *_ = check(hidden_states, w1, w2, topk_weights, topk_ids, inplace, activation,
                        apply_router_weight_on_input, global_num_experts, expert_map)
    return hidden_states.new_empty((T, H))


def reference(hidden_states, w1, w2, topk_weights, topk_ids):
    """torch, fp32 throughout: the law above without the kernel's roundings (the GPU check's and
    the CPU tests' reference)."""
    xf = hidden_states.float()
    I = w2.shape[2]
    out = torch.zeros(xf.shape[0], w2.shape[1], dtype=torch.float32, device=xf.device)
    ids = topk_ids.long()
    for e in torch.unique(ids).tolist():
        t, j = (ids == e).nonzero(as_tuple=True)
        g = xf[t] @ w1[e].float().t()
        a = torch.nn.functional.silu(g[:, :I]) * g[:, I:]
        out.index_add_(0, t, (a @ w2[e].float().t()) * topk_weights[t, j, None].float())
    return out


#: defined in ops.py's ``axe`` library, like the other ops
fused_moe = _define("fused_moe(Tensor hidden_states, Tensor w1, Tensor w2, Tensor topk_weights, Tensor topk_ids, "
                    "bool inplace=False, str activation=\"silu\", bool apply_router_weight_on_input=False, "
                    "int global_num_experts=-1, Tensor? expert_map=None) -> Tensor", _fused_moe, _fused_moe_fake)
