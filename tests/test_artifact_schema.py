"""Artifacts are checked against the launch.json schema when loaded, and launch expressions fail
with ArtifactError (never a bare Python exception)."""

import copy
import json
import os
import re
import shutil
import sys

import pytest

from axe.backends.cuda.artifact import Artifact, ArtifactError, check_expr, check_launch, eval_expr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
nvcc_missing = shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc")

#: a hand-written launch.json in the shape axe.build writes (an axpy over M elements, a TMA map,
#: and a distributed signature), valid as it stands
LAUNCH = {
    "schema": "axe.cuda.artifact/1",
    "name": "axpy",
    "arch": "sm_90a",
    "kernel": "axpy_kernel",
    "grid": ["(M + 255) // 256", 1, 1],
    "block": [256, 1, 1],
    "cluster": None,
    "dynamic_smem": "max(M * 2, 1024) % 4096",
    "cooperative": False,
    "args": [
        {"name": "A", "kind": "tensor", "dtype": "float32", "shape": ["M"], "strides": None, "alignment": 64},
        {"name": "B", "kind": "tensor", "dtype": "float32", "shape": ["M"], "strides": [1], "alignment": 64},
        {"name": "alpha", "kind": "scalar", "dtype": "float32"},
        {"name": "peers", "kind": "tensor", "dtype": "int64", "shape": [2], "strides": None, "alignment": 64},
        {"name": "sig", "kind": "tensor", "dtype": "int32", "shape": [64], "strides": None, "alignment": 64},
        {"name": "err", "kind": "tensor", "dtype": "int32", "shape": [8], "strides": None, "alignment": 64},
        {"name": "rank", "kind": "scalar", "dtype": "int32"},
        {"name": "epoch", "kind": "scalar", "dtype": "int32"},
        {"name": "timeout_ns", "kind": "scalar", "dtype": "int64"},
    ],
    "params": [
        {"name": "A_map", "kind": "tensormap", "tensormap": 0},
        {"name": "B_ptr", "kind": "tensor", "arg": "B", "dtype": "float32", "shape": ["M"], "strides": None,
         "alignment": 64},
        {"name": "M", "kind": "scalar", "dtype": "int32", "value": "M"},
        {"name": "alpha", "kind": "scalar", "dtype": "float32", "value": "alpha"},
    ],
    "symbols": {"M": {"arg": "A", "dim": 0}},
    "shape_vars": {"M": "int32"},
    "tensormaps": [{"param": "A_map", "tensor": "A", "dtype": "float32", "shape": None, "strides_bytes": None,
                    "box": [256], "elem_strides": [1], "swizzle": 0, "interleave": 0, "l2_promotion": 0,
                    "oob_fill": "zero"}],
    "resources": {"registers": 16, "static_smem": 0},
    "distributed": {
        "world": 2, "mesh": {"shape": [2], "names": ["gpus"]},
        "runtime": {"peers": "peers", "signals": "sig", "errors": "err", "rank": "rank", "epoch": "epoch",
                    "timeout": "timeout_ns"},
        "params": {"A": {"shape": [2, 1024], "layout": "S[(2,1024):(1@gpuid,1)]", "placements": None,
                         "local_shape": [1024], "buffer_shape": [1024], "symmetric": True, "scratch": False,
                         "dtype": "float32", "partial_dim": 0}},
        "signals_used": 1, "signal_owners": [[0, "copy at kernels/x.py:3"]], "features": [],
        "multicast": False,
    },
}


def _save(tmp_path, launch, name="a"):
    """A folder with ``launch`` as its launch.json and a stand-in cubin (load needs no real one)."""
    d = tmp_path / name
    d.mkdir()
    (d / "launch.json").write_text(json.dumps(launch))
    (d / "kernel.cubin").write_bytes(b"\x7fELF not a real cubin")
    return d


def _mutated(**edits):
    launch = copy.deepcopy(LAUNCH)
    for path, value in edits.items():
        *head, last = path.split("__")
        obj = launch
        for k in head:
            obj = obj[int(k)] if isinstance(obj, list) else obj[k]
        if isinstance(obj, list):
            last = int(last)
        if value is _DELETE:
            del obj[last]
        else:
            obj[last] = value
    return launch


_DELETE = object()


def test_the_hand_written_launch_is_valid_and_loads(tmp_path):
    check_launch(LAUNCH)
    a = Artifact.load(_save(tmp_path, LAUNCH))
    assert a.launch["grid"] == LAUNCH["grid"] and a.launch["cubin_sha256"]


@pytest.mark.parametrize("path, field", [
    ("grid", "grid"),
    ("cooperative", "cooperative"),
    ("args__2__dtype", "args[2].dtype"),
    ("params__2__value", "params[2].value"),
    ("symbols__M__dim", "symbols.M.dim"),
    ("tensormaps__0__box", "tensormaps[0].box"),
    ("distributed__runtime__rank", "distributed.runtime.rank"),
    ("distributed__params__A__local_shape", "distributed.params.A.local_shape"),
    ("distributed__signals_used", "distributed.signals_used"),
])
def test_a_missing_key_is_named(tmp_path, path, field):
    d = _save(tmp_path, _mutated(**{path: _DELETE}))
    with pytest.raises(ArtifactError, match=rf"launch\.json: {re.escape(field)}: required key is missing"):
        Artifact.load(d)


@pytest.mark.parametrize("path, value, field, words", [
    ("cooperative", 0, "cooperative", "expected true or false"),
    ("name", 3, "name", "expected a string"),
    ("grid", {"x": 1}, "grid", "expected a list"),
    ("block", [256, 1], "block", "has 2 entries, expected 3"),
    ("args", {}, "args", "expected a list"),
    ("args__0__alignment", "64", "args[0].alignment", "expected an integer"),
    ("args__0__kind", "pointer", "args[0].kind", "expected \"tensor\" or \"scalar\""),
    ("args__1__strides", 1, "args[1].strides", "expected a list"),
    ("params__0__tensormap", 3, "params[0].tensormap", "outside tensormaps"),
    ("params__1__arg", "alpha", "params[1].arg", "not a tensor argument"),
    ("grid__0", 2.5, "grid[0]", "is a float"),
    ("block__0", True, "block[0]", "is a bool"),
    ("resources__registers", None, "resources.registers", "expected an integer"),
    ("tensormaps__0__swizzle", "128B", "tensormaps[0].swizzle", "expected an integer"),
    ("distributed__world", "2", "distributed.world", "expected an integer"),
    ("distributed__mesh__names", "gpus", "distributed.mesh.names", "expected a list"),
    ("distributed__runtime__peers", "nobody", "distributed.runtime.peers", "'nobody' is not an argument"),
    ("distributed__params__A__symmetric", "yes", "distributed.params.A.symmetric", "expected true or false"),
    ("distributed__params__A__placements", [], "distributed.params.A.placements", "expected a string"),
    ("distributed__signal_owners", [[0]], "distributed.signal_owners[0]", "has 1 entries, expected 2"),
    ("distributed__nvshmem", 1, "distributed.nvshmem", "expected true or false"),
])
def test_a_wrong_type_is_named(tmp_path, path, value, field, words):
    d = _save(tmp_path, _mutated(**{path: value}))
    with pytest.raises(ArtifactError) as e:
        Artifact.load(d)
    msg = str(e.value)
    assert f"launch.json: {field}: " in msg and words in msg, msg


@pytest.mark.parametrize("path, expr, field, why", [
    ("grid__0", "M ** 2", "grid[0]", "operator Pow"),
    ("block__1", "__import__('os').getpid()", "block[1]", "only min(...) and max(...)"),
    ("dynamic_smem", "M.bit_length()", "dynamic_smem", "only min(...) and max(...)"),
    ("cluster", ["1", "M if M else 2", 1], "cluster[1]", "unsupported syntax IfExp"),
    ("params__2__value", "max()", "params[2].value", "max() of nothing"),
    ("args__0__shape__0", "M / 2", "args[0].shape[0]", "operator Div"),
    ("args__1__strides__0", "1.0", "args[1].strides[0]", "is not an integer"),
    ("params__1__shape__0", "M +", "params[1].shape[0]", "does not parse"),
])
def test_an_expression_outside_the_grammar_is_named(tmp_path, path, expr, field, why):
    d = _save(tmp_path, _mutated(**{path: expr}))
    expr = expr[1] if isinstance(expr, list) else expr
    with pytest.raises(ArtifactError) as e:
        Artifact.load(d)
    msg = str(e.value)
    assert f'launch.json: {field}: expression "{expr}" is not in the grammar' in msg and why in msg, msg


def test_the_issue_example(tmp_path):
    launch = copy.deepcopy(LAUNCH)
    launch["args"][2] = {"name": "C", "kind": "tensor", "dtype": "float32", "shape": ["M +* 2"],
                         "strides": None, "alignment": 16}
    with pytest.raises(ArtifactError, match=r'launch\.json: args\[2\]\.shape\[0\]: expression "M \+\* 2" is not '
                                            r"in the grammar"):
        Artifact.load(_save(tmp_path, launch))


def test_an_expression_over_an_unknown_name_is_named():
    with pytest.raises(ArtifactError, match=r"launch\.json: grid\[0\]: expression \"N \+ 1\" uses 'N', which is neither"):
        check_launch(_mutated(grid__0="N + 1"))


def test_not_json_and_not_an_object(tmp_path):
    d = _save(tmp_path, LAUNCH)
    (d / "launch.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="not JSON"):
        Artifact.load(d)
    (d / "launch.json").write_text("[1, 2]")
    with pytest.raises(ArtifactError, match="expected an object"):
        Artifact.load(d)


def test_division_by_zero_at_evaluation_is_an_artifact_error():
    with pytest.raises(ArtifactError, match=r"'\(M \+ 255\) // K' failed with K=0, M=5: ZeroDivisionError"):
        eval_expr("(M + 255) // K", {"M": 5, "K": 0})
    with pytest.raises(ArtifactError, match="ZeroDivisionError"):
        eval_expr("M % (K - K)", {"M": 5, "K": 3})


def test_max_of_nothing_at_evaluation_is_an_artifact_error():
    for expr in ("max()", "min()", "1 + max(M, min())"):
        with pytest.raises(ArtifactError, match=r"\(m(ax|in)\(\) of nothing\)"):
            eval_expr(expr, {"M": 5})


def test_evaluation_errors_are_never_bare_python_exceptions():
    cases = [("N + 1", {"M": 1}, "uses 'N'"), ("M + 1", {"M": "seven"}, "not an integer"),
             ("M + 1", {"M": 2.5}, "not an integer"), ("min(M, *M)", {"M": 1}, "plain arguments"),
             ("(" * 300 + "M" + ")" * 300, {"M": 1}, "not in the grammar"), (None, {}, "neither an int")]
    for expr, env, words in cases:
        with pytest.raises(ArtifactError, match=words):
            eval_expr(expr, env)
    assert eval_expr("((M + 127) // 128) * 2 - min(M, 3) % 2", {"M": 300}) == 5
    assert eval_expr(7, {}) == 7 and eval_expr("-M", {"M": 4}) == -4


def test_check_expr_parses_without_evaluating():
    assert check_expr("max(M // K, N)") == {"M", "K", "N"}     # K may be 0: nothing is evaluated
    assert check_expr(12) == frozenset()
    for bad in ("M +* 2", "lambda: 0", "M if 1 else 2", "[M]", "'M'", "max()"):
        with pytest.raises(ArtifactError, match="is not in the grammar"):
            check_expr(bad)


@pytest.mark.skipif(nvcc_missing, reason="nvcc not installed")
def test_artifacts_built_by_axe_still_load(tmp_path):
    """Happy path: axe.build (shape symbols, scalar params) and compile_kernel (a distributed
    signature), saved and loaded."""
    pytest.importorskip("tvm")
    sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
    sys.path.insert(0, ROOT)
    import _kernels_runtime as k
    from axe.backends.cuda.build import build
    from kernels import collectives

    art = build(k.axpy, "sm_90a", name="axpy")
    loaded = Artifact.load(art.save(tmp_path / "axpy"))
    assert loaded.launch["grid"] == ["M", 1, 1] and loaded.cubin == art.cubin
    assert loaded.launch == json.loads(json.dumps({**art.launch, "cubin_sha256": loaded.launch["cubin_sha256"]}))

    dist = collectives.build("reduce_scatter", 256, 64, 2)
    loaded = Artifact.load(dist.save(tmp_path / "rs"))
    assert loaded.launch["distributed"]["world"] == 2
    check_launch(loaded.launch)
