"""The report of a bounded wait that timed out: the device code's stores and the runtime's decoder
agree on the record (checked against the CUDA source the waits emit, not against the decoder's own
table), the runtime hands each module a slot and points the module's ``axe_report`` at it, and a
filled slot turns a failed launch or synchronize into a WaitTimeoutError that says who waited for
what.  CPU only: the page is a ctypes buffer behind a stand-in driver."""

import ctypes
import re

import pytest

from axe.backends.cuda import report as dev
from axe.runtime import launcher
from axe.runtime.report import ReportPages, WaitTimeoutError, decode, describe

# what each C variable of axe_report_trap means (the emitted source names them; the test says what they are)
_MEANING = {"kind": "kind", "cta": "cta", "rank": "cluster_rank", "tid": "thread", "object": "object",
            "stage": "stage", "want": "want", "seen": "seen", "ms": "timeout_ms"}


def emitted_offsets():
    """{C value stored: byte offset} of every store in the emitted report code, in source order."""
    stores = re.findall(r'st\.relaxed\.sys\.global\.u32 \[%0\+(\d+)\], %1;" :: "l"\(r\), "r"\(([\w]+)\)', dev.SOURCE)
    return [(value, int(off)) for off, value in stores]


def fake_record(values: dict, name: str) -> bytes:
    """The bytes the device code writes for ``values`` (by meaning) and barrier/flag ``name``."""
    raw = bytearray(dev.RECORD_BYTES)
    words = dict(zip(("n0", "n1", "n2", "n3"), dev.name_words(name)))
    for var, off in emitted_offsets():
        if var in _MEANING:
            v = values[_MEANING[var]]
        elif var in words:
            v = words[var]
        else:
            v = int(var.rstrip("u"))    # the magic, a literal
        raw[off:off + 4] = v.to_bytes(4, "little")
    return bytes(raw)


def test_emitted_stores_cover_the_record_once_and_publish_the_magic_last():
    stores = emitted_offsets()
    offsets = [off for _, off in stores]
    assert len(set(offsets)) == len(offsets) == 10 + dev.NAME_WORDS, stores
    assert all(off % 4 == 0 and off + 4 <= dev.RECORD_BYTES for off in offsets)
    magic_var, magic_off = stores[-1]
    assert magic_off == 0 and int(magic_var.rstrip("u")) == 0x52455841          # "AXER"
    body = dev.SOURCE
    magic_at = body.index("st.relaxed.sys.global.u32 [%0+0]")
    last_field = body.rindex("st.relaxed.sys.global.u32 [%0+", 0, magic_at)
    assert last_field < body.index("fence.sc.sys", last_field) < magic_at, "the magic is stored before the fence"
    assert "trap;" in body and "printf" not in body and "__noinline__" not in body
    # a thread that loses the claim parks before the stores instead of trapping over the winner's record
    claim = body.index("atomicCAS(&axe_report_claim")
    assert claim < body.index("for (;;) asm volatile(\"nanosleep", claim) < body.index("st.relaxed.sys")


def test_decode_reads_what_the_device_writes():
    vals = {"kind": dev.MBARRIER, "cta": 77, "cluster_rank": 1, "thread": 128, "object": 0x440, "stage": 2,
            "want": 1, "seen": 0, "timeout_ms": 10000}
    rec = decode(fake_record(vals, "pipe_empty"))
    assert rec == dict(vals, magic=dev.MAGIC, name="pipe_empty")
    text = describe(rec, "gemm_float16_row", 3)
    assert text.startswith("gemm_float16_row on cuda:3: CTA 77 (cluster rank 1) thread 128 waited 10000 ms for "
                           "phase 1 of mbarrier 'pipe_empty' stage 2 (shared 0x440)"), text
    assert "another CTA of its cluster" in text and "trap" in text


def test_flag_record_and_long_names():
    vals = {"kind": dev.FLAG, "cta": 5, "cluster_rank": 0, "thread": 256, "object": 13, "stage": 0, "want": 1,
            "seen": 0, "timeout_ms": 250}
    rec = decode(fake_record(vals, "a_very_long_flag_name_indeed"))
    assert rec["name"] == "a_very_long_flag"          # the first 16 bytes travel
    text = describe(rec, "k")
    assert "CTA 5 (cluster rank 0) thread 256 waited 250 ms for flag 'a_very_long_flag'[13] to become 1 (it read 0)" \
        in text and "co-resident" in text


def test_an_unfilled_or_torn_slot_is_no_report():
    assert decode(bytes(dev.RECORD_BYTES)) is None
    vals = dict.fromkeys(_MEANING.values(), 1)
    raw = bytearray(fake_record(vals, "x"))
    raw[0:4] = bytes(4)                                # fields written, magic not yet: not a report
    assert decode(bytes(raw)) is None
    with pytest.raises(ValueError, match="bytes"):
        decode(b"\0" * 8)


class FakeDriver:
    """The few driver calls the report path makes, over ctypes memory (a 'device pointer' is the
    host address, as on a UVA system)."""

    class CUresult:
        CUDA_SUCCESS = 0
        CUDA_ERROR_NOT_FOUND = 500

    CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_DEVICEMAP = 1, 2

    def __init__(self, globals_=("axe_report",)):
        self.buffers, self.flags, self.written = [], [], {}
        self.symbols = {name.encode(): ctypes.c_uint64(0) for name in globals_}

    def cuMemHostAlloc(self, size, flags):
        buf = ctypes.create_string_buffer(b"\xff" * size, size)    # dirty: the runtime must zero it
        self.buffers.append(buf)
        self.flags.append(flags)
        return self.CUresult.CUDA_SUCCESS, ctypes.addressof(buf)

    def cuMemHostGetDevicePointer(self, host, flags):
        return self.CUresult.CUDA_SUCCESS, host

    def cuModuleGetGlobal(self, module, name):
        if name not in self.symbols:
            return self.CUresult.CUDA_ERROR_NOT_FOUND, 0, 0
        return self.CUresult.CUDA_SUCCESS, ctypes.addressof(self.symbols[name]), 8

    def cuMemcpyHtoD(self, dst, src, n):
        ctypes.memmove(dst, src, n)
        return (self.CUresult.CUDA_SUCCESS,)


def test_slots_are_handed_out_per_module_and_read_back():
    d = FakeDriver()
    pages = ReportPages()
    slots = [pages.attach(d, f"module{i}", f"kernel{i}", i % 2) for i in range(70)]   # spills onto a second page
    assert slots == list(range(70)) and len(d.buffers) == 2 and d.flags == [3, 3]
    ptr = d.symbols[b"axe_report"].value               # the last module's pointer: slot 69 = page 1, slot 5
    assert ptr == ctypes.addressof(d.buffers[1]) + 5 * dev.RECORD_BYTES
    assert pages.reports() == [] and pages.read(69) == bytes(dev.RECORD_BYTES)
    vals = {"kind": dev.FLAG, "cta": 9, "cluster_rank": 0, "thread": 0, "object": 3, "stage": 0, "want": 1,
            "seen": 0, "timeout_ms": 10000}
    ctypes.memmove(ptr, fake_record(vals, "F_"), dev.RECORD_BYTES)    # as the device writes it
    pages.check(device=0)                              # kernel69 runs on device 1
    with pytest.raises(WaitTimeoutError, match=r"kernel69 on cuda:1: CTA 9 .* flag 'F_'\[3\]") as e:
        pages.check(device=1, cause=RuntimeError("unspecified launch failure"))
    assert isinstance(e.value.__cause__, RuntimeError)
    assert pages.attach(FakeDriver(globals_=()), "m", "k", 0) is None       # no bounded wait, no slot


def test_launcher_attaches_modules_and_turns_a_failed_launch_into_the_report(monkeypatch):
    from axe.backends.cuda.artifact import Artifact
    from axe.runtime import report as rt_report

    d = FakeDriver()
    d.cuModuleLoadData = lambda cubin: (0, object())
    d.cuModuleGetFunction = lambda module, name: (0, object())
    pages = ReportPages()
    monkeypatch.setattr(rt_report, "PAGES", pages)
    monkeypatch.setattr(launcher, "_ensure_context", lambda driver, index: None)
    monkeypatch.setattr(launcher, "_CACHE", {})
    launch = {"name": "gemm_cluster", "kernel": "gemm_cluster_kernel", "args": [], "params": [], "grid": [1, 1, 1],
              "block": [1, 1, 1], "arch": "sm_90a"}
    plain = launcher.Kernel(Artifact("", "", b"\x7fELF no report here", dict(launch, name="plain")), driver=d)
    plain.function(0)
    assert pages._owners == []                          # a module without bounded waits gets no slot
    k = launcher.Kernel(Artifact("", "", b"\x7fELF ... axe_report ...", launch), driver=d)
    k.function(0)
    k.function(0)                                       # cached: attached once
    assert pages._owners == [("gemm_cluster", 0)]
    gone = launcher.Kernel(Artifact("", "", b"axe_report", dict(launch, name="gone")), driver=FakeDriver(globals_=()))
    gone._driver.cuModuleLoadData, gone._driver.cuModuleGetFunction = d.cuModuleLoadData, d.cuModuleGetFunction
    with pytest.warns(UserWarning, match="gone: the cubin names axe_report, but cuModuleGetGlobal does not find it"):
        gone.function(0)
    with pytest.raises(launcher.LaunchError), launcher._reported(0):
        raise launcher.LaunchError("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED")
    vals = {"kind": dev.MBARRIER, "cta": 1, "cluster_rank": 1, "thread": 0, "object": 0x18, "stage": 3,
            "want": 0, "seen": 0, "timeout_ms": 10000}
    ctypes.memmove(d.symbols[b"axe_report"].value, fake_record(vals, "pipe_empty"), dev.RECORD_BYTES)
    with pytest.raises(WaitTimeoutError, match="gemm_cluster on cuda:0: CTA 1 .*mbarrier 'pipe_empty' stage 3"):
        with launcher._reported(0):
            raise launcher.LaunchError("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED")


def test_synchronize_states_the_report_instead_of_the_bare_cuda_error(monkeypatch):
    import torch

    from axe.runtime import report as rt_report
    pages = ReportPages()
    monkeypatch.setattr(rt_report, "PAGES", pages)
    d = FakeDriver()
    pages.attach(d, "module", "gemm_sk", 0)

    def failed(device=None):
        raise RuntimeError("CUDA error: unspecified launch failure")
    monkeypatch.setattr(torch.cuda, "synchronize", failed)
    with pytest.raises(RuntimeError, match="unspecified launch failure") as e:
        launcher.synchronize(0)                         # no report: CUDA's error, unchanged
    assert not isinstance(e.value, WaitTimeoutError)
    vals = {"kind": dev.FLAG, "cta": 131, "cluster_rank": 0, "thread": 128, "object": 263, "stage": 0, "want": 1,
            "seen": 0, "timeout_ms": 10000}
    ctypes.memmove(d.symbols[b"axe_report"].value, fake_record(vals, "F_"), dev.RECORD_BYTES)
    said = r"gemm_sk on cuda:0: CTA 131 .* thread 128 waited 10000 ms .*'F_'\[263\]"
    with pytest.raises(WaitTimeoutError, match=said):
        launcher.synchronize(0)
    pages.check(device=1)                               # another device's launches are not blamed


@pytest.mark.parametrize("name,wait", [("cluster_wait_timeout", "axe_mbarrier_wait_bounded"),
                                       ("flag_wait_timeout", "axe_flag_take")])
def test_gpu_timeout_cases_build(name, wait):
    """The GPU cases whose waits must time out (tests/gpu/cases_runtime.py) build here: one
    bounded wait each, with the cases' 50 ms timeout and the name the report will carry."""
    pytest.importorskip("tvm")
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "gpu", "cases_runtime.py")
    spec = importlib.util.spec_from_file_location("cases_runtime", path)
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    assert name in cases.CHECKS
    art = cases.BUILDS[name]()
    calls = re.findall(rf"\b{wait}\((?!void\*|int\*)[^;]*;", art.cuda_source)
    assert len(calls) == 1 and ", 50000000, " in calls[0], calls
    named = "never_arrives" if wait == "axe_mbarrier_wait_bounded" else "F_"
    assert all(f"(uint){w}" in calls[0] for w in dev.name_words(named)), calls[0]
    assert art.ptx.count("trap;") == 1 and ".u64 axe_report;" in art.ptx
    assert art.launch.get("cluster") == ([2, 1, 1] if "cluster" in name else None)
