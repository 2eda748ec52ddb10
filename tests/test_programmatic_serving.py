"""The serving ops' kernels are launched programmatically (issue 24: the decoder layer's kernels
overlap each other's launch and set-up), and the law that makes it safe holds in their PTX.

Law: a kernel marked ``programmatic`` in its ``launch.json`` touches no global memory before its
``griddepcontrol.wait`` — every path from the kernel's entry passes the wait before the first
global load, TMA load, atomic or store (checked on the PTX ptxas assembles: before the wait there
is no such instruction, and every branch there jumps to a label there, so control cannot leave the
prefix except through the wait).  The GEMM lets its dependents launch only after its producer has
issued every TMA load.  The distributed (mesh) GEMMs, built on the same skeleton, stay as they were:
programmatic launch is a one-GPU build's opt-in, which adds exactly the attribute and the two
``griddepcontrol`` statements to the TIR.
"""

import difflib
import re

import pytest

import axe.lang as Ax
from axe.backends.cuda.lang.grid_dependency import PDL_ATTR
from kernels import gemm, gemm_rs, ag_gemm, rmsnorm, rotary, silu_mul, softmax

WAIT, RELEASE = "griddepcontrol.wait", "griddepcontrol.launch_dependents"
#: a memory instruction and its state spaces (none named: generic addressing, which may be global)
MEMORY = re.compile(r"^(?:@!?%\w+\s+)?(ld|st|red|atom|cp\.async|cp\.reduce\.async|multimem)\b(\S*)")
TMA_LOAD = re.compile(r"^(?:@!?%\w+\s+)?cp\.async\.bulk\.tensor\.\S*shared::\w+\.global")
LABEL = re.compile(r"^(\$?\w+):")
BRANCH = re.compile(r"^(?:@!?%\w+\s+)?bra(?:\.uni)?\s+(\$?\w+);")


def instructions(ptx):
    """The kernel's PTX body as stripped lines (its one ``.entry``), comments dropped."""
    body = ptx[ptx.index(".entry"):]
    return [ln.split("//")[0].strip() for ln in body.splitlines() if ln.split("//")[0].strip()]


def touches_global(line):
    """Whether the instruction may access global memory (a prefetch moves nothing into the kernel)."""
    m = MEMORY.match(line)
    if not m or "prefetch" in m.group(2):
        return False
    spaces = set(re.findall(r"\.(global|shared(?:::\w+)?|param|local|const)\b", m.group(2)))
    return not spaces or "global" in spaces


def check_waits_first(ptx):
    """The law of the module docstring on ``ptx``; returns the lines after the wait."""
    lines = instructions(ptx)
    waits = [i for i, ln in enumerate(lines) if ln.startswith(WAIT)]
    assert waits, "no unpredicated griddepcontrol.wait"
    prefix = lines[:waits[0]]
    labels = {m.group(1) for ln in prefix if (m := LABEL.match(ln))}
    for ln in prefix:
        assert not touches_global(ln), f"global memory accessed before the wait: {ln}"
        b = BRANCH.match(ln)
        assert not b or b.group(1) in labels, f"a branch before the wait leaves past it: {ln}"
    rest = lines[waits[0]:]
    assert any(touches_global(ln) for ln in rest)      # the kernel does read and write after it
    return rest


SERVING = {
    "rmsnorm": lambda: rmsnorm.dynamic(4096, "bfloat16"),
    "rmsnorm_ragged": lambda: rmsnorm.dynamic(1000, "float16"),       # a predicated tail piece
    "fused_add_rmsnorm": lambda: rmsnorm.dynamic_add(4096, "bfloat16"),
    "silu_and_mul": lambda: silu_mul.dynamic(14336, "bfloat16"),
    "silu_and_mul_tail": lambda: silu_mul.dynamic(1000, "bfloat16"),  # the short last block's branch
    "rotary_neox": lambda: rotary.dynamic(128, 32, 8, True, "bfloat16", "int64"),
    "rotary_gptj_nokey": lambda: rotary.dynamic(64, 12, 0, False, "float16", "int32"),
    "softmax": lambda: softmax.dynamic(1000, "float16"),
}

#: make_dynamic's decode configurations as torch.ops.axe.gemm builds them (kernels.gemm_select): a
#: decode bucket's transposed tile and plain tile cut in K, and the unsplit plain tile; these are
#: launched programmatically (max_rows <= kernels.gemm_config.PROGRAMMATIC_ROWS)
GEMMS = {
    "decode_swapped_split": dict(max_rows=16, tile_m=16, tile_n=128, split_k=2),
    "decode_split": dict(max_rows=128, tile_n=128, split_k=2),
    "decode_whole": dict(max_rows=64, tile_n=128),
}
#: the larger buckets' configurations, launched plainly (measured slower programmatically at 2048 rows)
PLAIN_GEMMS = {
    "persistent": dict(),
    "persistent_128": dict(tile_n=128, stages=6),
    "pingpong": dict(schedule="pingpong"),
    "middle_split": dict(max_rows=256, tile_n=256, split_k=3),
}


@pytest.mark.parametrize("name", SERVING)
def test_serving_kernel_waits_before_touching_memory(name):
    art = Ax.compile_kernel(SERVING[name](), "sm_90a")
    assert art.launch["programmatic"] is True
    rest = check_waits_first(art.ptx)
    assert sum(ln.startswith(RELEASE) for ln in rest) == 1


@pytest.mark.parametrize("name", GEMMS)
def test_serving_gemm_waits_and_releases_after_its_last_load(name):
    art = Ax.compile_kernel(gemm.make_dynamic(1024, 2048, "bfloat16", "col", **GEMMS[name]), "sm_90a")
    assert art.launch["programmatic"] is True
    rest = check_waits_first(art.ptx)
    releases = [i for i, ln in enumerate(rest) if ln.startswith(RELEASE)]
    loads = [i for i, ln in enumerate(rest) if TMA_LOAD.match(ln)]
    assert len(releases) == 1 and loads and max(loads) < releases[0]


@pytest.mark.parametrize("name", PLAIN_GEMMS)
def test_larger_buckets_gemms_launch_plainly(name):
    art = Ax.compile_kernel(gemm.make_dynamic(1024, 2048, "bfloat16", "col", **PLAIN_GEMMS[name]), "sm_90a")
    assert not art.launch.get("programmatic") and "griddepcontrol" not in art.ptx


def _script(k):
    return Ax.build_func(k, "sm_90a")[0].script()


MESH = {
    "gemm_rs": lambda: gemm_rs.make(1024, 1024, 1024, 2),
    "ag_gemm": lambda: ag_gemm.make(1024, 1024, 1024, 2),
    "gemm_static": lambda: gemm.make(1024, 1024, 1024),
}


@pytest.mark.parametrize("name", MESH)
def test_mesh_and_static_gemms_are_not_programmatic(name):
    """The kernels that do not opt in carry neither the attribute nor a griddepcontrol."""
    func = Ax.build_func(MESH[name](), "sm_90a")[0]
    assert PDL_ATTR not in (func.attrs or {}) and "griddepcontrol" not in func.script()


def test_the_opt_in_adds_only_the_attribute_and_the_two_statements():
    """The skeleton's TIR with ``programmatic`` differs from the one without in exactly the
    PrimFunc attribute, one wait and one release — so a kernel that leaves it off (every mesh
    kernel) is the TIR it was."""
    off = _script(gemm.make(1024, 1024, 1024)).splitlines()
    on = _script(gemm.make(1024, 1024, 1024, programmatic=True)).splitlines()
    diff = [ln for ln in difflib.unified_diff(off, on, lineterm="", n=0) if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    removed = [ln[1:] for ln in diff if ln[0] == "-"]
    added = [ln[1:].strip() for ln in diff if ln[0] == "+"]
    assert len(removed) == 1 and "T.func_attr" in removed[0] and PDL_ATTR not in removed[0]
    assert added[0] == removed[0].strip()[:-2] + f', "{PDL_ATTR}": 1}})'
    assert added[1:] == ['T.ptx.griddepcontrol("wait", "")', 'T.ptx.griddepcontrol("launch_dependents", "")']
