"""The check contract of dispatch: a schedule declines by returning its reason; anything its
check raises is a bug, which reaches the user as a ScheduleBug naming the schedule, the operator
and where it was written, chained to what the check raised (its traceback included)."""

import traceback

import pytest

pytest.importorskip("tvm")

import axe.lang as Ax  # noqa: E402
from test_lang import collective as copy_rows  # noqa: E402  (a kernel of two register copies)
from axe.layout import S  # noqa: E402
from axe.ops import ExecScope, OpCall, Tensor  # noqa: E402
from axe.schedules import registry  # noqa: E402
from axe.schedules.context import building  # noqa: E402
from axe.schedules.dispatch import DispatchError, ScheduleBug, dispatch  # noqa: E402


@pytest.fixture
def schedules(monkeypatch):
    """Register schedules for this test only (the registry as it was comes back afterwards)."""
    registry.candidates("copy", "cuda")          # load the real ones first, then copy the list
    monkeypatch.setattr(registry, "_REGISTRY", list(registry._REGISTRY))
    return registry.add_schedule


def _broken_check(call, ctx):
    return {}["no such key"]                     # a bug: the check itself is wrong


def _never_emits(call, plan, ctx):
    raise AssertionError("a schedule that did not fit was emitted")


def _call(op):
    import tvm
    buf = tvm.tirx.decl_buffer((64,), "float16", name="A")
    t = Tensor(buf, S[(64,)], (64,), "float16", "global", name="A")
    return OpCall(op, {"dst": t, "src": t}, ExecScope("cta", 0, 128), where="probe.py:7")


def test_a_decline_by_return_is_listed(schedules):
    schedules("probe", "too_small", "*", 5, check=lambda call, ctx: "the tile is too small for me",
              emit=_never_emits)
    schedules("probe", "wrong_dtype", "*", 1, check=lambda call, ctx: "float16 is not my dtype",
              emit=_never_emits)
    with building("sm_90a") as ctx, pytest.raises(DispatchError) as err:
        dispatch(_call("probe"), ctx)
    text = str(err.value)
    assert "no schedule fits probe on sm_90a" in text and "probe.py:7" in text
    assert "too_small" in text and "declined: the tile is too small for me" in text
    assert "wrong_dtype" in text and "declined: float16 is not my dtype" in text


def test_a_check_that_raises_is_a_bug_named_with_its_traceback(schedules):
    schedules("probe", "declines", "*", 9, check=lambda call, ctx: "not mine", emit=_never_emits)
    schedules("probe", "broken", "*", 5, check=_broken_check, emit=_never_emits)
    schedules("probe", "never_asked", "*", 1, check=lambda call, ctx: "unreachable", emit=_never_emits)
    with building("sm_90a") as ctx, pytest.raises(ScheduleBug) as err:
        dispatch(_call("probe"), ctx)
    bug = err.value
    assert bug.schedule == "broken"
    assert str(bug).startswith("schedule broken raised while checking probe at probe.py:7 on sm_90a: KeyError")
    assert isinstance(bug.__cause__, KeyError)
    frames = [f.name for f in traceback.extract_tb(bug.__cause__.__traceback__)]
    assert "_broken_check" in frames                    # the check's own frame, where the bug is
    assert "_broken_check" in "".join(traceback.format_exception(bug))


def test_a_value_error_raised_by_a_check_is_a_bug_not_a_decline(schedules):
    def check(call, ctx):
        raise ValueError("tile 3 is odd")
    schedules("probe", "raises_value_error", "*", 5, check=check, emit=_never_emits)
    with building("sm_90a") as ctx, pytest.raises(ScheduleBug, match="schedule raises_value_error raised .*"
                                                                     "ValueError: tile 3 is odd"):
        dispatch(_call("probe"), ctx)


def test_a_schedule_bug_in_a_kernel_reaches_the_user_whole(schedules):
    schedules("copy", "broken_copy", "cuda", 1000, check=_broken_check, emit=_never_emits)
    with pytest.raises(ScheduleBug) as err:
        Ax.build_func(copy_rows, "sm_90a")
    assert not isinstance(err.value, Ax.KernelError)        # a bug, not the kernel author's to fix
    assert "schedule broken_copy raised while checking copy at " in str(err.value)
    assert "test_lang.py:" in str(err.value)                   # the kernel's source line
    assert isinstance(err.value.__cause__, KeyError)
    assert "_broken_check" in "".join(traceback.format_exception(err.value))


def test_the_same_kernel_builds_without_the_broken_schedule():
    func, ctx = Ax.build_func(copy_rows, "sm_90a")
    assert [r.chosen for r in ctx.records] == ["vector", "vector"]
