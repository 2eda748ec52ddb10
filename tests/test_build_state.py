"""A kernel build's state lives on its build context: the scopes entered and the tensors registered
belong to the open build, a build opened inside another leaves the outer one's alone, and asking
for the build context outside a build is an error naming who asked (never a made-up sm_90a one)."""

import pytest

pytest.importorskip("tvm")

import tvm  # noqa: E402

import axe.lang as Ax  # noqa: E402
from axe.layout import S  # noqa: E402
from axe.ops.build import OutsideBuildError  # noqa: E402
from axe.ops.scope import ExecScope, current_scope, pop_scope, push_scope  # noqa: E402
from axe.ops.tensor import Tensor, as_operand, lookup_tensor, register_tensor  # noqa: E402
from axe.schedules.context import current_context  # noqa: E402
from axe.schedules.context import building  # noqa: E402


def _tensor(name="A"):
    buf = tvm.tirx.decl_buffer((8, 8), "float16", name=name)
    return Tensor(buf, S[(8, 8):(1, 8)], (8, 8), "float16", "global", name=name)    # column-major


def test_current_context_outside_a_build_names_the_caller():
    def kernel_factory_helper():
        return current_context()
    with pytest.raises(OutsideBuildError, match=r"kernel_factory_helper\(\) .* outside a kernel build"):
        kernel_factory_helper()
    with pytest.raises(OutsideBuildError, match=r"^operator copy outside a kernel build"):
        current_context("operator copy")


def test_a_construct_outside_a_build_names_itself():
    with pytest.raises(OutsideBuildError, match=r"^Ax.cuda.mbarrier outside a kernel build"):
        Ax.cuda.mbarrier(1, 2)


def test_scopes_and_tensors_belong_to_the_open_build():
    t = _tensor()
    with building("sm_90a") as outer:
        push_scope(ExecScope("warp", 0, 128, 0, 1))
        register_tensor(t)
        assert current_scope().kind == "warp" and lookup_tensor(t.buffer) is t
        with building("sm_100a") as inner:          # a build inside a build starts empty
            assert current_context() is inner and current_scope() is None
            assert lookup_tensor(t.buffer) is None
            assert as_operand(t.buffer, "copy").layout == S[(8, 8)]      # read row-major
        assert current_context() is outer and current_scope().kind == "warp"
        assert as_operand(t.buffer, "copy") is t
        assert outer.scopes[-1].kind == "warp" and list(outer.tensors.values()) == [t]
        pop_scope()
        assert current_scope() is None
    assert current_scope() is None and lookup_tensor(t.buffer) is None      # nothing outlives the build


def test_outside_a_build_there_is_no_scope_to_enter_and_no_tensor_to_register():
    with pytest.raises(OutsideBuildError, match="entering a warp scope outside a kernel build"):
        push_scope(ExecScope("warp", 0, 128, 0, 1))
    with pytest.raises(OutsideBuildError, match="registering tensor B outside a kernel build"):
        register_tensor(_tensor("B"))


def test_equal_builds_close_in_their_own_order():
    with building("sm_90a") as a:
        with building("sm_90a") as b:
            assert a == b and current_context() is b
        assert current_context() is a
