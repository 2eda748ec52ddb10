"""Where a kernel's bounded waits report a timeout, and how the runtime reads the report.

A module whose code holds a bounded wait on another CTA (``axe.backends.cuda.report``) defines
the ``__device__`` pointer ``axe_report``.  When the runtime loads such a module it gives it a
64-byte slot of a pinned, device-mapped host page (:class:`ReportPages`, allocated once per
process with ``cuMemHostAlloc(DEVICEMAP | PORTABLE)``, 64 slots a page) and writes the slot's
device address into ``axe_report`` (``cuModuleGetGlobal`` + ``cuMemcpyHtoD``).  A wait that
times out fills the slot and traps; the trap kills the CUDA context, but host memory survives,
so when a launch or a synchronize then fails, :meth:`ReportPages.check` finds the filled slots
and raises :class:`WaitTimeoutError` that says, in words, which kernel, CTA and thread waited
for which barrier or flag, and for how long.

Only ``cuda.bindings`` (the driver handle the launcher passes in, its results read by
:mod:`axe.runtime.driver`) and ctypes are used; TVM never is.
"""

from __future__ import annotations

import ctypes
import threading

from axe.backends.cuda.report import FIELDS, FLAG, KINDS, MAGIC, MBARRIER, NAME_WORDS, RECORD_BYTES, SYMBOL

from .driver import check_result

__all__ = ["WaitTimeoutError", "ReportPages", "decode", "describe", "PAGE_BYTES"]

PAGE_BYTES = 4096
_SLOTS = PAGE_BYTES // RECORD_BYTES


class WaitTimeoutError(RuntimeError):
    """A wait on another CTA passed its timeout; the launch was ended with a trap (the CUDA
    context is lost: the process must be restarted to use the GPU again)."""


def decode(raw: bytes) -> dict | None:
    """The fields of one record (``RECORD_BYTES`` bytes as the device wrote them), or None when
    the slot was never filled (its magic word is not :data:`~axe.backends.cuda.report.MAGIC`)."""
    if len(raw) < RECORD_BYTES:
        raise ValueError(f"report record: {len(raw)} bytes, expected {RECORD_BYTES}")
    words = [int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(RECORD_BYTES // 4)]
    if words[FIELDS["magic"]] != MAGIC:
        return None
    rec = {k: words[i] for k, i in FIELDS.items() if k != "name"}
    at = FIELDS["name"]
    rec["name"] = b"".join(w.to_bytes(4, "little") for w in words[at:at + NAME_WORDS]).rstrip(b"\0").decode(
        "ascii", "replace")
    return rec


def describe(rec: dict, kernel: str = "a kernel", device: int | None = None) -> str:
    """One sentence for a decoded record: who waited for what, how long, and what that means."""
    where = f"{kernel}" + (f" on cuda:{device}" if device is not None else "")
    who = (f"CTA {rec['cta']} (cluster rank {rec['cluster_rank']}) thread {rec['thread']} waited "
           f"{rec['timeout_ms']} ms for ")
    if rec["kind"] == MBARRIER:
        what = (f"phase {rec['want']} of mbarrier '{rec['name']}' stage {rec['stage']} (shared 0x{rec['object']:x}), "
                "which another CTA of its cluster completes; it never came (the peer CTA failed or its arrivals "
                "do not match the expected count)")
    elif rec["kind"] == FLAG:
        what = (f"flag '{rec['name']}'[{rec['object']}] to become {rec['want']} (it read {rec['seen']}), which "
                "another CTA of this launch sets; it never came (the CTAs are not co-resident, or the setter failed)")
    else:
        what = f"an unknown kind of wait ({rec['kind']}; known: {KINDS})"
    return f"{where}: {who}{what}; the launch was ended with a trap"


class ReportPages:
    """The process's report slots: pinned, device-mapped host pages handed out 64 bytes per
    loaded module, each slot remembered with the kernel's name and device."""

    def __init__(self):
        self._pages = []        # (host address, device address) of each page
        self._owners = []       # slot index -> (kernel name, device index)
        self._lock = threading.Lock()

    def _new_page(self, driver):
        # mapped into the device address space, pinned for every context (one page serves all devices)
        flags = getattr(driver, "CU_MEMHOSTALLOC_DEVICEMAP", 2) | getattr(driver, "CU_MEMHOSTALLOC_PORTABLE", 1)
        host = int(check_result(driver, driver.cuMemHostAlloc(PAGE_BYTES, flags), "cuMemHostAlloc(report page)"))
        ctypes.memset(host, 0, PAGE_BYTES)
        dev = int(check_result(driver, driver.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer(report page)"))
        self._pages.append((host, dev))

    def attach(self, driver, module, kernel: str, device: int) -> int | None:
        """Point ``module``'s ``axe_report`` at a fresh slot; return the slot index, or None when
        the module has no bounded wait (no such symbol)."""
        got = driver.cuModuleGetGlobal(module, SYMBOL.encode())
        if got[0] != driver.CUresult.CUDA_SUCCESS:
            return None
        dptr, size = got[1], got[2]
        if int(size) != 8:
            raise ValueError(f"{kernel}: __device__ {SYMBOL} is {int(size)} bytes, expected a pointer (8)")
        with self._lock:
            slot = len(self._owners)
            if slot // _SLOTS >= len(self._pages):
                self._new_page(driver)
            self._owners.append((kernel, device))
            addr = ctypes.c_uint64(self._pages[slot // _SLOTS][1] + slot % _SLOTS * RECORD_BYTES)
        check_result(driver, driver.cuMemcpyHtoD(dptr, ctypes.addressof(addr), 8), f"cuMemcpyHtoD({SYMBOL} of {kernel})")
        return slot

    def read(self, slot: int) -> bytes:
        """The slot's bytes as the device left them."""
        host = self._pages[slot // _SLOTS][0] + slot % _SLOTS * RECORD_BYTES
        return ctypes.string_at(host, RECORD_BYTES)

    def reports(self, device: int | None = None) -> list:
        """A sentence for every filled slot (of ``device``'s modules, or all)."""
        out = []
        for slot, (kernel, dev) in enumerate(list(self._owners)):
            if device is not None and dev != device:
                continue
            rec = decode(self.read(slot))
            if rec is not None:
                out.append(describe(rec, kernel, dev))
        return out

    def check(self, device: int | None = None, cause: BaseException | None = None):
        """Raise :class:`WaitTimeoutError` (from ``cause``) if a wait on ``device`` reported a timeout."""
        found = self.reports(device)
        if found:
            raise WaitTimeoutError("; ".join(found)) from cause


#: the process's pages (the launcher attaches every module it loads)
PAGES = ReportPages()
