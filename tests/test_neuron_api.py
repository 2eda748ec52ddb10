"""Every NKI call axe emits is one the NKI API reference documents, with documented arguments
(axe/backends/neuron/nki_api.py re-types the reference as data: ``neuronxcc.nki`` for trn1, ``nki.*``
for trn2), and the NumPy model accepts exactly those signatures."""

import ast
import inspect

import numpy as np
import pytest

from axe.backends.neuron import nki_api
from axe.backends.neuron.sim import Machine
from axe.lang import compile_kernel
from kernels import attention
from kernels.attention import nki_attention
from kernels import rmsnorm, softmax
from kernels import gemm
from kernels.nki_reductions import nki_reductions


def _dotted(node):
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def _check_source(src, target="trn1"):
    """``(calls checked, problems)``: each nl./nisa./nki. call bound to its documented signature."""
    calls, attributes, methods = nki_api.API[target]
    tree = ast.parse(src)
    problems, checked = [], 0
    called = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                not isinstance(node.func.value, ast.Name):            # a tile method: x[...].name(...)
            called.add(id(node.func))
            if node.func.attr not in methods:
                problems.append(f"line {node.lineno}: tile method {node.func.attr} is not in the reference table")
            else:
                try:
                    nki_api.signature(node.func.attr, target).bind(*node.args, **{k.arg: k.value for k in node.keywords})
                    checked += 1
                except TypeError as err:
                    problems.append(f"line {node.lineno}: {node.func.attr}: {err}")
            continue
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name is None or name.split(".")[0] not in ("nl", "nisa", "nki"):
                continue
            called.add(id(node.func))
            if name not in calls:
                problems.append(f"line {node.lineno}: {name} is not in the NKI reference table")
                continue
            try:
                nki_api.signature(name, target).bind(*node.args, **{k.arg: k.value for k in node.keywords})
                checked += 1
            except TypeError as err:
                problems.append(f"line {node.lineno}: {name}: {err}")
    for node in ast.walk(tree):
        name = _dotted(node)
        if name and name.split(".")[0] in ("nl", "nisa", "nki") and id(node) not in called:
            if name not in attributes:
                problems.append(f"line {node.lineno}: {name} is not a documented NKI name")
    return checked, problems


@pytest.mark.parametrize("kernel", [gemm.make(1000, 700, 300, "bfloat16"), gemm.make(300, 1000, 200, b_major="col"),
                                    nki_attention(1, 300), attention.make(1, 200, 600, 4, 2, 64, "float16", True, lse=True),
                                    nki_reductions(), softmax.softmax, rmsnorm.rmsnorm],
                         ids=["gemm", "gemm_nt", "attention", "attention_causal_gqa_lse", "reductions", "softmax",
                              "rmsnorm"])
@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_emitted_calls_match_the_reference(kernel, target):
    src = compile_kernel(kernel, target).source
    checked, problems = _check_source(src, target)
    assert not problems, "\n".join(problems)
    assert checked >= 10


def test_the_check_catches_an_undocumented_argument():
    checked, problems = _check_source("nl.load(A, masks=1)\nnisa.nc_matmul(a)\nnl.gather(x)\nnl.float64\n"
                                      "w[0:1, 0:4].broadcast_to((128, 4), 1)\nw[0:1, 0:4].reshape((4,))")
    assert len(problems) == 6


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_the_model_implements_the_documented_signatures(target):
    from axe.backends.neuron.model import namespaces
    mods = namespaces(target)(Machine())
    root = {"trn1": "neuronxcc.nki", "trn2": "nki"}[target]
    short = {"nl": mods[f"{root}.language"], "nisa": mods[f"{root}.isa"], "nki": mods[root]}
    calls, attributes, _ = nki_api.API[target]
    for name in calls:
        mod, attr = name.split(".")
        fn = getattr(short[mod], attr)
        doc = nki_api.signature(name, target)
        got = inspect.signature(fn)
        for p in doc.parameters.values():
            assert p.name in got.parameters, f"{name}: the model lacks documented parameter {p.name}"
            assert got.parameters[p.name].kind == p.kind, f"{name}: {p.name} kind differs from the reference"
    for name in attributes:
        mod, attr = name.split(".")
        assert hasattr(short[mod], attr), name
