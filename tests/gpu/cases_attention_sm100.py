"""GPU cases for the Blackwell (sm_100a) form of the flash-attention forward
(``kernels/parts/attention_tcgen05.py``): the same problems and the same check as
``cases_attention.py``'s (fp32 torch SDPA, NaN-poisoned outputs, a guard batch, the LSE), built for
``sm_100a`` — ragged lengths 1, 77, 1000, 2061, both masks, both head sizes and dtypes, grouped-query
heads, ``seq_q != seq_kv``, the key tile 64 and three stages.  ``run_all`` skips them on a device
that is not compute capability 10.0; no B200 has been lent, so they are built and ptxas-checked on
the CPU machine only (``tests/test_attention_sm100.py``) and have never run.

    .venv/bin/python scripts/gpu_build.py --match 'attention_sm100_'                     # CPU machine
    python3 tests/gpu/run_all.py --only $(ls .carry/artifacts | grep '^attention_sm100_')  # a B200
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases_attention as hopper  # noqa: E402


def _case(seq_q, seq_kv, d, causal, dtype="bfloat16", kv_heads=2, lse=True, **config):
    name, kw = hopper._case(seq_q, seq_kv, d, causal, dtype, kv_heads, lse)
    tag = "".join(f"_{k}{v}" for k, v in sorted(config.items()))
    return name.replace("attention_", "attention_sm100_", 1) + tag, {**kw, "variant": None, **config}


CASES = dict(
    [_case(s, s, d, c) for s in (1, 77, 1000, 2061) for d in (64, 128) for c in (False, True)]
    + [_case(s, s, d, c, "float16") for s, d in ((77, 128), (2061, 64)) for c in (False, True)]
    + [_case(77, 1000, 128, True), _case(1000, 77, 64, True), _case(1000, 1000, 128, True, kv_heads=1),
       _case(2061, 2061, 128, False, kv_heads=4, lse=False)]
    + [_case(2061, 2061, 128, True, bn=64, stages=3), _case(1000, 1000, 64, False, stages=3)])
hopper.CASES.update(CASES)          # check_attention reads a case's problem from that table by name


def _builder(name, kw):
    def build():
        import axe.lang as Ax
        from kernels.attention import make
        return Ax.compile_kernel(make(name=name, **{k: v for k, v in kw.items() if k != "variant"}), "sm_100a")
    return build


BUILDS = {name: _builder(name, kw) for name, kw in CASES.items()}
CHECKS = {name: hopper.check_attention for name in BUILDS}
