"""The call-free report of a bounded wait that timed out (device side, and the record's layout).

A thread that waits for another CTA (an mbarrier another CTA of its cluster completes, a flag
another CTA of the launch sets) spins with ``%globaltimer``; when the wait passes its timeout it
writes a report record and executes ``trap``, which ends the launch.  No function is called on
that path (``printf`` would be one): any call in a kernel with wgmma makes ptxas serialize the
wgmma (C7510) or ignore ``setmaxnreg`` (C7507), so the whole report is inline code — plain
stores, one fence, one trap — that costs registers only where it runs.

Where the record goes: every module whose code holds a bounded wait defines the ``__device__``
pointer :data:`SYMBOL`.  The runtime (``axe.runtime.report``) points it, once per loaded module,
at a 64-byte slot of a pinned, device-mapped host page; host memory outlives the trap (the
context does not), so the runtime reads the slot after a launch or synchronize fails and states
the report in words.  A null pointer (a module loaded by something else) only traps.

The record, little-endian u32 words at byte offset ``4 * word`` of the slot (:data:`FIELDS`):
the fields are stored first, then ``fence.sc.sys``, then :data:`MAGIC` in word 0, so a reader
that sees the magic sees the fields.  Only the first thread of a module to time out writes
(an atomic claim on a ``__device__`` word of the module); the others park (``nanosleep``) until
its trap ends the launch, since a trap of theirs could end it before the record is written.
"""

from __future__ import annotations

__all__ = ["SYMBOL", "MAGIC", "FIELDS", "NAME_WORDS", "RECORD_BYTES", "MBARRIER", "FLAG", "KINDS", "SOURCE",
           "name_words"]

#: the module's ``__device__`` pointer to its report slot (``extern "C"``: the symbol is this name)
SYMBOL = "axe_report"
#: word 0 of a filled record ("AXER" in little-endian bytes)
MAGIC = 0x52455841
#: a wait on an mbarrier that another CTA of the cluster completes / a flag another CTA sets
MBARRIER, FLAG = 1, 2
KINDS = {MBARRIER: "mbarrier", FLAG: "flag"}
#: u32 word index of each field; ``name`` is NAME_WORDS words of NUL-padded ASCII
FIELDS = {"magic": 0, "kind": 1, "cta": 2, "cluster_rank": 3, "thread": 4, "object": 5, "stage": 6,
          "want": 7, "seen": 8, "timeout_ms": 9, "name": 10}
NAME_WORDS = 4
RECORD_BYTES = 64


def name_words(name: str) -> tuple:
    """``name`` (its first ``4 * NAME_WORDS`` ASCII bytes, NUL-padded) as NAME_WORDS
    little-endian u32 immediates, which the wait passes to the report as constants."""
    raw = name.encode("ascii", "replace")[:4 * NAME_WORDS].ljust(4 * NAME_WORDS, b"\0")
    return tuple(int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(NAME_WORDS))


def _store(field, value, offset=0):
    return (f'    asm volatile("st.relaxed.sys.global.u32 [%0+{4 * (FIELDS[field] + offset)}], %1;" '
            f':: "l"(r), "r"({value}) : "memory");\n')


# the guard lets every wait's source carry this text while the module defines it once
SOURCE = (
    "#ifndef AXE_REPORT_DEFINED\n#define AXE_REPORT_DEFINED\n"
    f'extern "C" {{ __device__ unsigned int* {SYMBOL}; __device__ unsigned int {SYMBOL}_claim; }}\n'
    "// the report of a wait that timed out, then the end of the launch: inline stores and a trap,\n"
    "// no call (a call would serialize the kernel's wgmma)\n"
    "__forceinline__ __device__ void axe_report_trap(unsigned kind, unsigned object, unsigned stage, unsigned want,\n"
    "    unsigned seen, long long timeout_ns, unsigned n0, unsigned n1, unsigned n2, unsigned n3) {\n"
    f"  unsigned int* r = {SYMBOL};\n"
    "  if (r != 0) {\n"
    "    // a thread that loses the claim parks: trapping now could end the launch before the\n"
    "    // winner's record is written; the winner's trap ends it\n"
    f"    if (atomicCAS(&{SYMBOL}_claim, 0u, 1u) != 0u)\n"
    '      for (;;) asm volatile("nanosleep.u32 1000000;" ::: "memory");\n'
    "    unsigned rank, tid = threadIdx.x, cta = blockIdx.x, ms = (unsigned)(timeout_ns / 1000000);\n"
    '    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));\n'
    + _store("kind", "kind") + _store("cta", "cta") + _store("cluster_rank", "rank") + _store("thread", "tid")
    + _store("object", "object") + _store("stage", "stage") + _store("want", "want") + _store("seen", "seen")
    + _store("timeout_ms", "ms") + "".join(_store("name", f"n{i}", i) for i in range(NAME_WORDS))
    + '    asm volatile("fence.sc.sys;" ::: "memory");\n'
    + _store("magic", f"{MAGIC}u")
    + '    asm volatile("fence.sc.sys;" ::: "memory");\n'
    "  }\n"
    '  asm volatile("trap;");\n'
    "}\n"
    "#endif\n"
)
