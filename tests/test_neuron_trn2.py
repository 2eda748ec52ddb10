"""trn2: the same kernel sources built for the ``nki.*`` API (NKI 0.2+, Neuron 2.27+) and run on the
model of NeuronCore-v3; oracles: numpy on fresh random data, the documented NeuronCore-v3 numbers
(axe/backends/neuron/hardware.py cites each), and the trn1 build of the same kernel."""

import ml_dtypes
import numpy as np
import pytest

from axe.backends.neuron import hardware as hw
from axe.backends.neuron.emit import TargetError
from axe.backends.neuron.nki2 import respell
from axe.backends.neuron.model import HardwareError, run
from axe.lang import compile_kernel
from kernels import gemm, rmsnorm, softmax
from kernels.attention import nki_attention
from kernels.nki_reductions import nki_reductions

BF16 = ml_dtypes.bfloat16
TRN1_HEAD = "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\nimport neuronxcc.nki.isa as nisa\n\n"
TRN2_HEAD = "import nki\nimport nki.language as nl\nimport nki.isa as nisa\n\n"


def _kernel(head, body, out_shape=(128, 512)):
    src = head + "@nki.jit\ndef k(A):\n    O = nl.ndarray(%r, dtype=nl.float32, buffer=nl.shared_hbm)\n" % (out_shape,)
    return src + "".join("    " + line + "\n" for line in body.strip().splitlines()) + "    return O\n"


def _run2(body, A=None, target="trn2", head=TRN2_HEAD):
    A = np.random.default_rng().standard_normal((128, 512)).astype(np.float32) if A is None else A
    return run(_kernel(head, body), "k", {"A": A}, target=target)


def test_neuroncore_v3_numbers_are_the_documented_ones():
    c = hw.core("trn2")
    assert (c.pmax, c.sbuf_partition_bytes, c.psum_partition_bytes, c.psum_banks) == (128, 224 * 1024, 16 * 1024, 8)
    assert c.tensore_peak_flops == 79e12 and c.engine_hz["vector"] == 0.96e9 and len(c.engines) == 4
    assert c.sbuf_partition_bytes * c.pmax == 28 * 2 ** 20              # "28MiB (or, 128 partitions of 224KiB)"
    # the schedules plan with one set of TensorE/PSUM limits: both generations must share it
    for field in ("pmax", "psum_bank_bytes", "matmul_stationary_free", "matmul_moving_free", "matmul_contraction"):
        assert getattr(hw.TRN1, field) == getattr(c, field), field


@pytest.mark.parametrize("M, N, K, dtype, b_major", [(130, 513, 129, "float16", "row"), (300, 1000, 200, "float16", "col"),
                                                     (512, 512, 512, "bfloat16", "row")])
def test_gemm_on_trn2_matches_numpy(M, N, K, dtype, b_major):
    art = compile_kernel(gemm.make(M, N, K, dtype, b_major), "trn2")
    assert art.source.startswith("import nki\n") and "neuronxcc" not in art.source
    assert "mgrid" not in art.source and "mask=" not in art.source and "nl.load" not in art.source
    dt = {"float16": np.float16, "bfloat16": BF16}[dtype]
    rng = np.random.default_rng()
    A = rng.standard_normal((M, K)).astype(dt)
    B = rng.standard_normal((N, K) if b_major == "col" else (K, N)).astype(dt)
    out, cost = art.run(A=A, B=B)
    ref = A.astype(np.float32) @ (B.T if b_major == "col" else B).astype(np.float32)
    np.testing.assert_allclose(out["C"].astype(np.float32), ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())
    assert cost.peak_flops == 79e12 and 0 < cost.tensore_utilization <= 1 + 1e-9
    if b_major == "row" and K % 128:        # A's k-steps reach TensorE with k on the partitions: a DMA transpose
        assert "nisa.dma_transpose" in art.source


@pytest.mark.parametrize("heads, seq", [(1, 300), (2, 512)])
def test_attention_on_trn2_issues_what_trn1_issues(heads, seq):
    """One TensorE instruction for one (numerics of both builds: tests/test_attention_trn.py)."""
    k = nki_attention(heads, seq)
    Z = np.zeros((1, seq, heads, 128), BF16)
    _, cost = compile_kernel(k, "trn2").run(numerics=False, Q=Z, K=Z, V=Z)
    _, cost1 = compile_kernel(k, "trn1").run(numerics=False, Q=Z, K=Z, V=Z)
    for call in ("nisa.nc_matmul", "nisa.nc_transpose"):
        assert cost.counts[call] == cost1.counts[call]
    assert cost.flops == cost1.flops


@pytest.mark.parametrize("kernel, inputs", [
    (softmax.softmax, lambda r: {"X": r.standard_normal((softmax.ROWS, softmax.N)).astype(np.float16)}),
    (rmsnorm.rmsnorm, lambda r: {"X": r.standard_normal((rmsnorm.ROWS, rmsnorm.N)).astype(np.float16),
                                 "W": r.standard_normal((1, rmsnorm.N)).astype(np.float16)}),
    (nki_reductions(), lambda r: {"X": r.standard_normal((128, 300)).astype(np.float32)})],
    ids=["softmax", "rmsnorm", "reductions"])
def test_one_source_kernels_on_trn2_match_their_trn1_build(kernel, inputs):
    data = inputs(np.random.default_rng())
    out2, _ = compile_kernel(kernel, "trn2").run(**data)
    out1, _ = compile_kernel(kernel, "trn1").run(**data)
    for name, ref in out1.items():
        np.testing.assert_allclose(out2[name].astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=2e-3)
    x = data["X"].astype(np.float32)
    if kernel is softmax.softmax:          # and numpy
        e = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(out2["Y"].astype(np.float32), e / e.sum(1, keepdims=True), atol=2e-3)


def test_rmsnorm_broadcasts_the_weights_on_tensore():
    src = compile_kernel(rmsnorm.rmsnorm, "trn2").source
    assert "is_stationary_onezero=True" in src and "broadcast_to" not in src
    assert "op=nl.rsqrt" in src and "scale=" in src       # x·c + eps folded into the activation


@pytest.mark.parametrize("body, match", [
    ('x = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="x")\n'
     'i_p, i_f = nl.mgrid[0:128, 0:512]\nx[i_p, i_f] = nl.load(A[i_p, i_f])', r"nl.mgrid is not in nki\.\*"),
    ('x = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="x")\nx[0:128, 0:512] = nl.load(A[0:128, 0:512])',
     r"nl.load is not in nki\.\*.*neuronxcc.nki API"),
    ('x = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="x")\n'
     'y = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="y")\ny[0:128, 0:512] = nl.add(x, x)',
     r"nl.add\(...\) computes a value in the neuronxcc.nki API"),
    ('x = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.sbuf, name="x")\n'
     'c = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum, name="c")\n'
     'c[0:128, 0:128] = nisa.nc_matmul(x[0:128, 0:128], x[0:128, 0:128])', r"nisa.nc_matmul\(dst, stationary, moving"),
], ids=["mgrid", "load", "value-computing-add", "matmul-without-dst"])
def test_a_trn1_spelling_in_a_trn2_source_is_refused(body, match):
    with pytest.raises(HardwareError, match=match):
        _run2(body)


@pytest.mark.parametrize("body, match", [
    ('x = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="x")\nnisa.dma_copy(dst=x[0:128, 0:512], '
     'src=A[0:128, 0:512])', r"nisa.dma_copy is not in neuronxcc.nki.*it belongs to the nki\.\* API"),
    ('x = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.sbuf, name="x")\n'
     'c = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum, name="c")\n'
     'nisa.nc_matmul(dst=c[0:128, 0:128], stationary=x[0:128, 0:128], moving=x[0:128, 0:128])',
     r"nisa.nc_matmul\(stationary, moving.*unexpected keyword argument 'dst'"),
], ids=["dma_copy", "matmul-with-dst"])
def test_a_trn2_spelling_in_a_trn1_source_is_refused(body, match):
    with pytest.raises(HardwareError, match=match):
        _run2(body, target="trn1", head=TRN1_HEAD)


def test_a_source_for_the_other_generation_is_refused_at_its_import():
    art = compile_kernel(nki_reductions(), "trn1")
    X = np.zeros((128, 300), np.float32)
    with pytest.raises(HardwareError, match=r"imports neuronxcc.*trn2 model runs nki.language, nki.isa"):
        run(art.source, art.name, {"X": X}, target="trn2")
    with pytest.raises(HardwareError, match=r"imports nki.*trn1 model"):
        run(respell(art.source), art.name, {"X": X}, target="trn1")


LOADED2 = 'x = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="x")\n' \
          'nisa.dma_copy(dst=x[0:128, 0:512], src=A[0:128, 0:512])\n'


@pytest.mark.parametrize("body, match", [
    ('c = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum, name="c")\n'
     'nisa.dma_copy(dst=O[0:128, 0:512], src=c[0:128, 0:512])', r"dma_copy src.*psum"),
    ('c = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum, name="c")\n'
     'nisa.tensor_tensor(dst=x[0:128, 0:512], data1=c[0:128, 0:512], data2=c[0:128, 0:512], op=nl.add)',
     "cannot both reside in PSUM"),
    ('t = nl.zeros((128, 128), dtype=nl.bfloat16, buffer=nl.psum, name="t")', "PSUM tiles hold float32"),
    ('c = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum, name="c")\n'
     'y = nl.zeros((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf, name="y")\n'
     'nisa.nc_transpose(dst=c[0:128, 0:128], data=y[0:128, 0:128])', "must equal data's bfloat16"),
    ('nisa.tensor_reduce(dst=x[0:1, 0:512], op=nl.add, data=x[0:128, 0:512], axis=[0], keepdims=True)',
     "axis 0 is the partition dimension"),
    ('nisa.activation(dst=x[0:128, 0:512], op=nl.add, data=x[0:128, 0:512])', "not an nki.language activation"),
    ('big = nl.zeros((128, 57345), dtype=nl.float32, buffer=nl.sbuf, name="big")', r"SBUF needs .* > 229376"),
], ids=["dma-reads-psum", "two-psum-inputs", "bf16-psum", "transpose-dtype", "partition-reduce", "alu-as-activation",
        "sbuf-224k"])
def test_trn2_model_enforces_the_documented_rules(body, match):
    with pytest.raises(HardwareError, match=match):
        _run2(LOADED2 + body)


def test_trn2_sbuf_holds_what_trn1_refuses():
    body = 'big = nl.zeros((128, 53248), dtype=nl.float32, buffer=nl.sbuf, name="big")'     # 208 KiB per partition
    _run2(body)
    with pytest.raises(HardwareError, match=r"SBUF needs .* > 196608"):
        _run2(body.replace("nl.float32", "nl.float32"), target="trn1", head=TRN1_HEAD)


def test_matmul_first_write_overwrites_then_accumulates_and_scalar_ops_reverse():
    A = np.random.default_rng().standard_normal((128, 512)).astype(np.float32)
    body = LOADED2 + '''c = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum, name="c")
nisa.nc_matmul(dst=c[0:128, 0:512], stationary=x[0:128, 0:128], moving=x[0:128, 0:512])
nisa.nc_matmul(dst=c[0:128, 0:512], stationary=x[0:128, 128:256], moving=x[0:128, 0:512])
o = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="o")
v = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf, name="v")
nisa.tensor_reduce(dst=v[0:128, 0:1], op=nl.maximum, data=x[0:128, 0:512], axis=[1], keepdims=True)
nisa.tensor_scalar(dst=o[0:128, 0:512], data=c[0:128, 0:512], op0=nl.subtract, operand0=v[0:128, 0:1], reverse0=True)
nisa.dma_copy(dst=O[0:128, 0:512], src=o[0:128, 0:512])'''
    (out,), cost = _run2(body, A)          # an nl.ndarray PSUM tile starts as NaN: the first write must overwrite
    c = A[:, :128].T @ A + A[:, 128:256].T @ A
    np.testing.assert_allclose(out, A.max(1, keepdims=True) - c, rtol=1e-4, atol=1e-3)
    # FP32 inputs on NeuronCore-v3: 20 of 79 TFLOPS (hardware.py [ARCH2])
    assert cost.engine_s["tensor"] == pytest.approx(2 * 512 * (79 / 20) * hw.TRN2.tensore_cycle_s)


def test_respell_refuses_what_nki_0_2_cannot_say():
    src = TRN1_HEAD + '''@nki.jit
def k(A):
    c = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum, name="c")
    x = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.sbuf, name="x")
    for i in nl.affine_range(2):
        c[0:128, 0:128] = nisa.nc_matmul(x[0:128, 0:128], x[0:128, 0:128])
    return c
'''
    with pytest.raises(TargetError, match="overwrite of a PSUM box written since the tile's allocation"):
        respell(src)
    twice = src.replace("    for i in nl.affine_range(2):\n        c[0:128, 0:128] = nisa.nc_matmul(x[0:128, 0:128], x[0:128, 0:128])",
                        "    c[0:128, 0:128] = nisa.nc_matmul(x[0:128, 0:128], x[0:128, 0:128])\n" * 2)
    assert twice != src
    with pytest.raises(TargetError, match="overwrite of a PSUM box written"):
        respell(twice)
    assert "nisa.nc_matmul(dst=c[0:128, 0:128]" in respell(twice.replace("c[0:128, 0:128] = nisa", "c[0:128, 0:128] += nisa"))
    with pytest.raises(TargetError, match="has no nki.* form"):
        respell(src.replace("c[0:128, 0:128] = nisa.nc_matmul", "c[0:128, 0:128] = nisa.iota"))


@pytest.mark.parametrize("pattern, offset, cm", [([[-1, 512]], 5, 1), ([[-2, 16], [1, 32]], -3, 2)])
def test_affine_select_follows_the_documented_pseudo_code(pattern, offset, cm):
    """[v2.27.0 nki.isa.affine_select]: value = offset + channel·channel_multiplier + Σ step·index over the
    pattern's dims (row-major over the free elements); kept where cmp_op(value, 0)."""
    A = np.random.default_rng().standard_normal((128, 512)).astype(np.float32)
    out, _ = _run2(f"""
t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=t[0:128, 0:512], src=A[0:128, 0:512])
nisa.affine_select(dst=t[0:128, 0:512], pattern={pattern}, offset={offset}, channel_multiplier={cm}, on_true_tile=t[0:128, 0:512], on_false_value=-7.0, cmp_op=nl.greater_equal)
nisa.dma_copy(dst=O[0:128, 0:512], src=t[0:128, 0:512])""", A)
    want = A.copy()
    for c in range(128):
        for i, idx in enumerate(np.ndindex(*[n for _, n in pattern])):
            if offset + c * cm + sum(step * j for (step, _), j in zip(pattern, idx)) < 0:
                want[c, i] = -7.0
    np.testing.assert_array_equal(out[0], want)
    with pytest.raises(HardwareError, match="must be in sbuf"):
        _run2("""
s = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
nisa.affine_select(dst=s[0:128, 0:512], pattern=[[-1, 512]], offset=0, channel_multiplier=1, on_true_tile=s[0:128, 0:512], on_false_value=-7.0, cmp_op=nl.greater_equal)""")
