"""The NumPy model of NKI enforces trn1's documented rules (axe/backends/neuron/hardware.py cites
each) and computes what the NKI calls mean; oracle: the documented limits and NumPy."""

import numpy as np
import pytest

from axe.backends.neuron import hardware as hw
from axe.backends.neuron.model import HardwareError, run

HEAD = "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\nimport neuronxcc.nki.isa as nisa\n\n"


LOADED = '''x = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="x")
x[0:128, 0:512] = nl.load(A[0:128, 0:512])
'''


def _random():
    return np.random.default_rng().standard_normal((128, 512)).astype(np.float32)


def _run(body, inputs=None, out_shape=(128, 512)):
    src = HEAD + "@nki.jit\ndef k(A):\n    O = nl.ndarray(%r, dtype=nl.float32, buffer=nl.shared_hbm)\n" % (out_shape,)
    src += "".join("    " + line + "\n" for line in body.strip().splitlines()) + "    return O\n"
    A = np.zeros((128, 512), np.float32) if inputs is None else inputs
    return run(src, "k", {"A": A})


@pytest.mark.parametrize("body, message", [
    ('t = nl.zeros((129, 4), dtype=nl.float32, buffer=nl.sbuf, name="t")', "partition dimension 129 > 128"),
    ('t = nl.zeros((128, 49153), dtype=nl.float32, buffer=nl.sbuf, name="t")',
     f"SBUF needs {49153 * 4} bytes per partition > {hw.SBUF_PARTITION_BYTES}"),
    ('t = nl.zeros((128, 4097), dtype=nl.float32, buffer=nl.psum, name="t")', "PSUM needs"),
    ("\n".join(f'p{i} = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.psum, name="p{i}")' for i in range(9)),
     "9 banks > 8"),
    ('t = nl.zeros((128, 64), dtype=nl.bfloat16, buffer=nl.psum, name="t")', "PSUM tiles hold float32"),
])
def test_allocation_rules(body, message):
    with pytest.raises(HardwareError, match=message):
        _run(body)


def test_eight_banks_fit():
    _run("\n".join(f'p{i} = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum, name="p{i}")' for i in range(8)))


MM = '''a = nl.zeros((128, 256), dtype=nl.float16, buffer=nl.sbuf, name="a")
b = nl.zeros((128, 1024), dtype=nl.float16, buffer=nl.sbuf, name="b")
c = nl.zeros((128, 2048), dtype=nl.float32, buffer=nl.psum, name="c")
ab = nl.zeros((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf, name="ab")
'''


@pytest.mark.parametrize("line, message", [
    ("c[0:128, 0:513] += nisa.nc_matmul(a[0:128, 0:128], b[0:128, 0:513])", "moving free size 513 > 512"),
    ("r = nisa.nc_matmul(a[0:128, 0:129], b[0:128, 0:512])", "stationary free size 129 > 128"),
    ("c[0:128, 0:512] += nisa.nc_matmul(a[0:64, 0:128], b[0:128, 0:512])", "contraction .* 64 and 128"),
    ("c[0:128, 0:512] += nisa.nc_matmul(a[0:128, 0:128], ab[0:128, 0:512])", "must share a dtype"),
    ("c[0:128, 0:512] += nisa.nc_matmul(c[0:128, 0:128], b[0:128, 0:512])", "stationary must be an SBUF tile"),
    ("c[0:128, 256:768] += nisa.nc_matmul(a[0:128, 0:128], b[0:128, 0:512])", "crosses a PSUM bank"),
    ("a[0:128, 0:128] = nisa.nc_matmul(a[0:128, 0:128], b[0:128, 0:128])", "TensorE writes PSUM"),
    ("c[0:128, 0:128] = nisa.nc_transpose(c[0:128, 0:128])", "TensorE reads its input from SBUF"),
])
def test_tensore_rules(line, message):
    with pytest.raises(HardwareError, match=message):
        _run(MM + line)


@pytest.mark.parametrize("line, message", [
    ("i_p, i_f = nl.mgrid[0:128, 0:512]\nt[i_p, i_f] = nl.load(A[64 + i_p, i_f])", "out of bounds"),
    ("t[0:128, 0:1] = nl.max(t[0:128, 0:512], axis=[0], keepdims=True)", "axis 0 is the partition dimension"),
    ("i_p, i_f = nl.mgrid[0:128, 0:512]\nt[i_f, i_p] = nl.load(A[i_p, i_f])", "partition index must vary"),
    ("t[0:128, 0:512] = nl.add(t[0:128, 0:512], u[0:1, 0:512])", "broadcasts along the free dimension only"),
    ("t[0:128, 0:512] = nl.exp(A[0:128, 0:512])", "is in HBM"),
    ("t[0:128, 0:2] = nisa.affine_select(u[0:128, 0:2] , t[0:128, 0:2], t[0:128, 0:2])", "compile-time constant"),
])
def test_engine_and_dma_rules(line, message):
    alloc = ('t = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="t")\n'
             'u = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="u")\n')
    with pytest.raises(HardwareError, match=message):
        _run(alloc + line)


def test_masked_load_keeps_the_rest_and_numerics_match_numpy():
    rng = np.random.default_rng()
    A = rng.standard_normal((128, 512)).astype(np.float32)
    body = '''t = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="t")
i_p, i_f = nl.mgrid[0:128, 0:512]
t[i_p, i_f] = nl.load(A[64 + i_p, i_f], mask=(64 + i_p < 128))
m = nl.zeros((128, 1), dtype=nl.float32, buffer=nl.sbuf, name="m")
m[0:128, 0:1] = nl.max(t[0:128, 0:512], axis=[1], keepdims=True)
e = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="e")
e[0:128, 0:512] = nl.exp(nl.subtract(t[0:128, 0:512], m[0:128, 0:1]))
nl.store(O[0:128, 0:512], value=e[0:128, 0:512])'''
    (out,), cost = _run(body, A)
    t = np.zeros_like(A)
    t[:64] = A[64:]
    np.testing.assert_allclose(out, np.exp(t - t.max(1, keepdims=True)), rtol=1e-6)
    assert cost.dma_bytes == 64 * 512 * 4 + 128 * 512 * 4          # masked-off rows are not moved


def test_matmul_accumulates_in_psum_and_cost_counts_flops():
    A = _random()
    body = LOADED + '''c = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum, name="c")
c[0:128, 0:512] += nisa.nc_matmul(x[0:128, 0:128], x[0:128, 0:512])
c[0:128, 0:512] += nisa.nc_matmul(x[0:128, 128:256], x[0:128, 0:512])
o = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="o")
o[0:128, 0:512] = nl.copy(c[0:128, 0:512])
nl.store(O[0:128, 0:512], value=o[0:128, 0:512])'''
    (out,), cost = _run(body, A)
    np.testing.assert_allclose(out, A[:, :128].T @ A + A[:, 128:256].T @ A, rtol=1e-4, atol=1e-4)
    assert cost.flops == 2 * 2 * 128 * 128 * 512
    # FP32 inputs cost 4x the BF16 cycles (hardware.py [ARCH1])
    assert cost.engine_s["tensor"] == pytest.approx(2 * 512 * hw.TRN1.fp32_matmul_factor * hw.TENSORE_CYCLE_S)
    assert 0 < cost.tensore_utilization <= 1


def test_activation_scales_adds_bias_then_applies_the_function():
    A = _random()
    body = LOADED + '''b = nl.zeros((128, 1), dtype=nl.float32, buffer=nl.sbuf, name="b")
b[0:128, 0:1] = nl.load(A[0:128, 0:1])
y = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="y")
y[0:128, 0:512] = nisa.activation(nl.exp, x[0:128, 0:512], bias=nl.negative(b[0:128, 0:1]), scale=0.5)
nl.store(O[0:128, 0:512], value=y[0:128, 0:512])'''
    (out,), cost = _run(body, A)
    np.testing.assert_allclose(out, np.exp(A * 0.5 - A[:, :1]), rtol=1e-6)
    assert cost.counts["nisa.activation"] == 1 and cost.engine_s["scalar"] > 0
    with pytest.raises(HardwareError, match=r"bias must be a \(128, 1\) vector"):
        _run(body.replace("bias=nl.negative(b[0:128, 0:1])", "bias=x[0:128, 0:512]"), A)
