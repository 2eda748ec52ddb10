"""The compiled launch path of ``torch.ops.axe.*``: ``csrc/fast_ops.cpp`` (beside this module),
built on first use on each machine against the torch that imports it, loaded through ctypes.

The library registers one boxed C++ kernel as an op's CPU and CUDA kernel.  A call whose
signature (every tensor's dtype, shape, strides and device; the scalars) it has a plan for, and
whose data pointers are aligned as the plan demands, allocates the outputs, points the plan's
tensor maps at their tensors and calls ``cuLaunchKernel`` on torch's current stream without
entering Python (``cuLaunchKernelEx`` with programmatic stream serialization for a kernel built
programmatic, unless ``AXE_PROGRAMMATIC_LAUNCH=0`` when the call is made) (a plan with scratch only on the stream whose scratch set it holds); any other call runs the
op's checked Python implementation (registered as ``axe_checked::<op>``, same schema), which hands
its plan over (:meth:`Launcher.submit`) after checking.  ``axe.torch.ops`` decides which ops go
through it and reports the path in force (:func:`axe.torch.ops.launcher`).

The build: one compiler command (``$CXX``, else ``c++``; torch's headers and ``libc10`` /
``libtorch_cpu``; no ninja, no pybind11, no CUDA toolkit), into
``<folder>/<digest>/`` where the digest covers the source, the torch version, its CUDA
version and C++ ABI, and the compiler: a machine builds once per torch (11-27 s on 2 cores), under a
file lock, so concurrent processes build it once.  The folder is ``$AXE_FAST_OPS_DIR``, else
``~/.cache/axe/fast_ops`` (the default cache folder's, whatever ``$AXE_CACHE_DIR`` says: the
library belongs to the machine, the artifacts travel between machines and caches).
``AXE_FAST_OPS=0`` switches the path off.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["ENV", "ENV_DIR", "SOURCE", "FIXED", "Launcher", "BuildError", "build", "load", "record"]

ENV, ENV_DIR = "AXE_FAST_OPS", "AXE_FAST_OPS_DIR"
SOURCE = Path(__file__).resolve().parent / "csrc" / "fast_ops.cpp"
_I64 = ctypes.c_int64


class BuildError(RuntimeError):
    """The compiled launcher cannot be built or loaded here (the message says why)."""


def _torch_dirs(torch) -> tuple[Path, Path]:
    """torch's C++ headers and libraries (``include/``, ``lib/`` inside the torch package)."""
    root = Path(torch.__file__).resolve().parent
    return root / "include", root / "lib"


#: C++ standards tried in turn (newer torch headers want C++20; an older compiler may know only C++17)
STANDARDS = ("c++20", "c++17")


def _command(torch, compiler: str, out: Path, std: str) -> list:
    include, lib = _torch_dirs(torch)
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    return [compiler, "-O2", f"-std={std}", "-shared", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            f"-I{include}", str(SOURCE), "-o", str(out), f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}", "-ldl"]


def build(root=None) -> Path:
    """The library built for the torch imported here, under ``root`` (default: ``$AXE_FAST_OPS_DIR``
    or ``~/.cache/axe/fast_ops``); built now if absent.  :class:`BuildError` says
    why it cannot be (no compiler, no headers, the compiler's own error)."""
    import torch

    from .cache import _locked
    compiler = shutil.which(os.environ.get("CXX") or "c++")
    if compiler is None:
        raise BuildError(f"no C++ compiler ({os.environ.get('CXX') or 'c++'}) on PATH")
    if not SOURCE.is_file():
        raise BuildError(f"{SOURCE} is missing (an installation without axe's package data)")
    include, _ = _torch_dirs(torch)
    if not (include / "torch" / "library.h").is_file():
        raise BuildError(f"torch's C++ headers are not installed ({include / 'torch' / 'library.h'} is missing)")
    digest = hashlib.sha256("\0".join([SOURCE.read_text(), torch.__version__, str(torch.version.cuda),
                                       str(torch._C._GLIBCXX_USE_CXX11_ABI), compiler]).encode()).hexdigest()[:16]
    folder = Path(root or os.environ.get(ENV_DIR) or Path.home() / ".cache" / "axe" / "fast_ops") / digest
    so = folder / "fast_ops.so"
    if so.is_file():
        return so
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder.parent / f"{digest}.lock"):
        if so.is_file():                                  # another process built it meanwhile
            return so
        tmp = folder / f"fast_ops.{os.getpid()}.so"
        # a first import on a machine waits for the compiler: say so rather than hang silently
        print(f"axe: compiling the launcher of torch.ops.axe for torch {torch.__version__} into {folder} "
              f"(once per machine and torch; {ENV}=0 skips it)", file=sys.stderr, flush=True)
        for std in STANDARDS:
            r = subprocess.run(_command(torch, compiler, tmp, std), capture_output=True, text=True)
            if not r.returncode:
                break
        else:
            tmp.unlink(missing_ok=True)
            tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-12:])
            raise BuildError(f"{compiler} failed on {SOURCE.name} (torch {torch.__version__}, -std={std}):\n{tail}")
        os.replace(tmp, so)
    return so


class Launcher:
    """The loaded library (see the module docstring and the ``extern "C"`` functions of
    ``csrc/fast_ops.cpp``, whose contracts these methods state)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        lib = self._lib = ctypes.CDLL(str(path))
        lib.axe_fast_error.restype = lib.axe_fast_refusal.restype = ctypes.c_char_p
        lib.axe_fast_register.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        lib.axe_fast_submit.argtypes = [ctypes.c_char_p, ctypes.POINTER(_I64), _I64, ctypes.c_char_p, _I64]
        lib.axe_fast_enable.argtypes = [ctypes.c_int]
        lib.axe_fast_set_limit.argtypes = [_I64]
        lib.axe_fast_set_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.axe_fast_counts.argtypes = [ctypes.POINTER(_I64)]
        self._pending = ctypes.c_int.in_dll(lib, "axe_fast_pending_calls")
        #: the scratch sets of the plans handed over (by id), alive while the table may hold their
        #: pointers (a Kernel's release_scratch, or the Kernel itself gone, must not free them)
        self._kept = {}

    def pending(self) -> bool:
        """Whether some thread's call runs its checked implementation now (else :meth:`submit`
        has nothing to hand a plan to, and need not be asked)."""
        return self._pending.value != 0

    def register(self, name: str, checked_ns: str):
        """``axe::<name>`` launches through the library for CPU and CUDA tensors; a miss calls
        ``<checked_ns>::<name>`` (which must be defined, same schema)."""
        if self._lib.axe_fast_register(name.encode(), checked_ns.encode()) < 0:
            raise BuildError(f"registering axe::{name}: {self._lib.axe_fast_error().decode()}")

    def submit(self, name: str, words, scalars: bytes, keep=()) -> bool:
        """Hand the plan of :func:`record` (``words``, ``scalars``; ``keep``: the tensors whose
        pointers it holds besides the call's) to the call of ``axe::<name>`` being checked on this
        thread; False where none is (a direct call of the Python implementation: nothing to key
        the plan by)."""
        arr = (_I64 * len(words))(*words)
        r = self._lib.axe_fast_submit(name.encode(), arr, len(words), scalars, len(scalars))
        if r < 0:
            raise ValueError(self._lib.axe_fast_error().decode())
        if r and keep:
            self._kept[id(keep[0])] = keep
        return bool(r)

    def enable(self, on: bool):
        """False: every call takes the checked path and no plan is kept (``ops.FAST_PATH``)."""
        self._lib.axe_fast_enable(int(bool(on)))

    def set_limit(self, limit: int):
        """At most ``limit`` plans per op (then that op's are forgotten at once)."""
        self._lib.axe_fast_set_limit(int(limit))

    def clear(self):
        """Forget every plan (and the scratch sets kept for them)."""
        self._lib.axe_fast_clear()
        self._kept.clear()

    def set_launch(self, address: int | None, replace: int | None = None, launch_ex: int | None = None):
        """Launch through the function at ``address`` (``cuLaunchKernel``'s C signature: a test's
        stand-in) and, for programmatic plans, the one at ``launch_ex`` (``cuLaunchKernelEx``'s), and
        move tensor maps through the one at ``replace`` (``cuTensorMapReplaceAddress``'s) instead of
        libcuda's; None: libcuda's again."""
        self._lib.axe_fast_set_launch(address, replace, launch_ex)

    def counts(self) -> dict:
        """``{"launched": calls launched by the library, "checked": calls sent to the checked
        path (no plan, a misaligned pointer, or refused), "plans": plans kept, "refused": planned
        calls the library could not launch (no driver, no stream handle, the driver's error, a
        plan with scratch called on another stream or on a capturing one),
        "refusal": why the last one was refused}``."""
        out = (_I64 * 4)()
        self._lib.axe_fast_counts(out)
        return {"launched": out[0], "checked": out[1], "plans": out[2], "refused": out[3],
                "refusal": self._lib.axe_fast_refusal().decode()}


#: a slot's source in a record that is none of the call's tensors: the plan's scratch
FIXED = -(1 << 40)


def record(plan, sources, outputs=(), distinct=()) -> tuple[list, bytes, tuple] | None:
    """The words, bytes and kept tensors :meth:`Launcher.submit` takes for the
    :class:`~axe.runtime.plan.LaunchPlan` ``plan`` of an op's call made on torch's current stream
    (None where the plan needs more per call than the library does:
    :meth:`~axe.runtime.plan.LaunchPlan.fields`).  ``sources``: per slot of the plan but its
    scratch, ``(the op argument's position, or -(k + 1) for output k; the op's alignment in
    bytes)`` (a slot's alignment is the larger of the op's and the kernel's); ``outputs``: per
    output, ``(position of the argument whose dtype and device it takes, shape)``; ``distinct``:
    pairs of argument positions whose data pointers must differ.  The scratch slots hold the
    scratch set of the current stream (the library refuses a call on another)."""
    f = plan.fields()
    if f is None:
        return None
    if len(sources) + len(f.scratch) != len(plan.slots):
        raise ValueError(f"{plan.name}: {len(sources)} sources and {len(f.scratch)} scratch for the kernel's "
                         f"{len(plan.slots)} tensor arguments")
    sources = [*sources, *((FIXED, 1) for _ in f.scratch)]
    words = [f.func, *f.grid, *f.block, f.smem, int(f.programmatic), len(f.params), len(sources), *f.params]
    for (src, align), (_, kernel_align) in zip(sources, plan.slots):
        words += [src, max(align, kernel_align)]
    words.append(len(outputs))
    for like, shape in outputs:
        words += [like, len(shape), *shape]
    words.append(len(distinct))
    for a, b in distinct:
        words += [a, b]
    words += [f.stream, len(f.scratch), *f.scratch, len(f.maps)]
    for slot, tmap, ptr in f.maps:
        words += [slot, ptr, *(int.from_bytes(tmap[i:i + 8], "little", signed=True) for i in range(0, 128, 8))]
    return words, f.scalars, f.keep


def load(root=None) -> Launcher:
    """The library, built if needed (:func:`build`) and loaded; :class:`BuildError` where it
    cannot be, or where ``$AXE_FAST_OPS`` is ``0``."""
    if os.environ.get(ENV, "1") == "0":
        raise BuildError(f"{ENV}=0")
    try:
        return Launcher(build(root))
    except OSError as e:
        raise BuildError(f"loading the built library: {e}") from e
