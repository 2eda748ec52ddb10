"""The CUDA driver as the runtime reaches it: ``cuda.bindings.driver``, imported on first use, and
the one rule for reading its results.

Every driver call returns ``(CUresult, values...)``; :func:`check_result` turns a failure into a
:class:`LaunchError` naming the call and the driver's own name and description of the error, so
that no caller reads a result code itself.  Below the launcher and the report pages, which both
call the driver.
"""

from __future__ import annotations

__all__ = ["LaunchError", "cuda_driver", "check_result"]


class LaunchError(ValueError):
    """The arguments do not fit the kernel, or the launch itself failed."""


def cuda_driver():
    """``cuda.bindings.driver``; a :class:`LaunchError` saying what to install where it is absent."""
    try:
        from cuda.bindings import driver
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise LaunchError(
            "axe.runtime needs the cuda-bindings package (pip install 'axe[gpu]' or cuda-bindings)"
        ) from e
    return driver


def check_result(driver, result, what):
    """Unpack a ``cuda.bindings`` result tuple: its value (None when it has none, a tuple when
    several); a CUDA error is a :class:`LaunchError` naming ``what`` (the call) and the error."""
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if err != driver.CUresult.CUDA_SUCCESS:
        name = err
        try:
            _, n = driver.cuGetErrorName(err)
            _, s = driver.cuGetErrorString(err)
            name = f"{n.decode()}: {s.decode()}"
        except Exception:  # noqa: BLE001 - the error itself is what matters
            pass
        raise LaunchError(f"{what} failed: {name}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest
