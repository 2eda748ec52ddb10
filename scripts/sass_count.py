#!/usr/bin/env python
"""Opcode counts of a cubin's loops, from the assembler's own output (``nvdisasm``): which SASS
instructions a kernel's main loop issues per trip, by opcode and by the pipe class that ncu's
``sm__pipe_alu_cycles_active`` counts.

A loop is the address range from a backward branch's target to the branch; the *main loop* is the
innermost loop holding at least one ``HGMMA`` and one ``MUFU.EX2`` (attention's key loop: the
wgmmas and the softmax of a key tile).  Its static counts include every path through the body (a
guarded mask counts once, as the branch it sits behind); :func:`paths` splits the body at its
forward branches so the unguarded straight line can be told from the guarded blocks.

Usage::

    .venv/bin/python scripts/sass_count.py KERNEL.cubin [--all] [--alu]

``nvdisasm`` is found on ``PATH``, in ``$CUDA_PATH/bin``, or in the ``nvidia-cuda-nvdisasm`` wheel
(``pip install nvidia-cuda-nvdisasm``: ``site-packages/nvidia/cu*/bin``).
"""

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

#: opcodes (first dot-part of the mnemonic) that issue to the ALU pipe on sm_90: integer add and
#: logic, compares and selects, min/max, predicate logic, and the fp32 → 16-bit packing conversion
#: (ncu's pipe table: "ALU: bit manipulation, logic, integer except IMAD/IMUL, fast FP32→FP16")
ALU = frozenset({"ISETP", "FSETP", "FSEL", "SEL", "FMNMX", "IMNMX", "LOP3", "IADD3", "SHF", "PLOP3", "P2R", "R2P",
                 "F2FP", "LEA", "IABS", "FCHK", "VIMNMX", "IADD", "CSETP", "PRMT", "FLO", "POPC", "BMSK"})
#: integer multiply-adds (the FMA pipe's integer half: addressing arithmetic)
IMAD = frozenset({"IMAD", "IMUL", "VIADD", "IMADSP"})

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_LABEL_REF = re.compile(r"`\(([.A-Za-z0-9_]+)\)")
_LABEL_DEF = re.compile(r"^([.A-Za-z0-9_]+):\s*$")


def nvdisasm():
    """The path of ``nvdisasm`` (see the module docstring), or None."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    cands = [os.path.join(os.environ.get("CUDA_PATH", "/usr/local/cuda"), "bin", "nvdisasm")]
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        cands += sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "bin", "nvdisasm")), reverse=True)
    return next((c for c in cands if os.path.isfile(c) and os.access(c, os.X_OK)), None)


def disassemble(cubin):
    """``nvdisasm -c`` text of ``cubin`` (bytes or a path)."""
    tool = nvdisasm()
    if tool is None:
        raise FileNotFoundError("sass_count: nvdisasm not found on PATH, in $CUDA_PATH/bin or in the "
                                "nvidia-cuda-nvdisasm wheel (pip install nvidia-cuda-nvdisasm)")
    if isinstance(cubin, (bytes, bytearray)):
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            return _run(tool, f.name, "the cubin bytes")
    if not os.path.isfile(cubin):
        raise FileNotFoundError(f"sass_count: cubin {cubin!r} is not a file")
    return _run(tool, cubin, repr(cubin))


def _run(tool, path, what):
    r = subprocess.run([tool, "-c", path], capture_output=True, text=True)
    if r.returncode:
        raise ValueError(f"sass_count: nvdisasm could not read {what} (exit {r.returncode}): {r.stderr.strip()[:300]}")
    return r.stdout


class Insn(collections.namedtuple("Insn", "addr pred op mnemonic operands target")):
    """One SASS instruction: address, guard predicate ('' if none), opcode (first part of the
    mnemonic), the full mnemonic, the operand text, and a branch's target address (None)."""


def parse(text):
    """The instructions of a disassembly, in address order, with branch targets resolved."""
    labels, raw, pending = {}, [], []
    for line in text.splitlines():
        m = _LABEL_DEF.match(line.strip())
        if m:
            pending.append(m.group(1))
            continue
        m = _INSN.search(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        for name in pending:
            labels[name] = addr
        pending = []
        raw.append((addr, (m.group(2) or "").strip(), m.group(3), m.group(4)))
    out = []
    for addr, pred, mnem, ops in raw:
        ref = _LABEL_REF.search(ops)
        target = labels.get(ref.group(1)) if ref and mnem.split(".")[0] in ("BRA", "BRX", "JMP") else None
        out.append(Insn(addr, pred, mnem.split(".")[0], mnem, ops.strip(), target))
    return out


def loops(insns):
    """``[(start, end)]`` address ranges of the loops: each backward branch's target to the branch."""
    return sorted({(i.target, i.addr) for i in insns if i.target is not None and i.target <= i.addr})


def body(insns, span):
    return [i for i in insns if span[0] <= i.addr <= span[1]]


def main_loop(insns):
    """The innermost loop holding an ``HGMMA`` and a ``MUFU.EX2`` (see the module docstring)."""
    found = [s for s in loops(insns)
             if any(i.op == "HGMMA" for i in body(insns, s)) and any(i.mnemonic.startswith("MUFU.EX2")
                                                                   for i in body(insns, s))]
    if not found:
        raise ValueError("sass_count: no loop holds both an HGMMA and a MUFU.EX2 (not a wgmma softmax kernel?)")
    return min(found, key=lambda s: s[1] - s[0])


def counts(insns):
    """``Counter`` of opcodes (first part of the mnemonic) over ``insns``."""
    return collections.Counter(i.op for i in insns)


def alu(c):
    """The ALU-pipe instructions of an opcode ``Counter``."""
    return sum(n for op, n in c.items() if op in ALU)


def guarded(insns, span):
    """The main loop's body split at its forward branches: ``(straight, skipped)``, the instructions
    on the fall-through line that every trip executes and those inside a region some forward
    branch of the body can jump over (a guarded mask, a wait's retry), by address."""
    b = body(insns, span)
    skip = set()
    for i in b:
        if i.target is not None and span[0] <= i.addr < i.target <= span[1] + 16:
            skip.update(j.addr for j in b if i.addr < j.addr < i.target)
    return [i for i in b if i.addr not in skip], [i for i in b if i.addr in skip]


def report(cubin, show_all=False):
    """A text report of ``cubin``'s main loop (and, ``show_all``, of every loop)."""
    insns = parse(disassemble(cubin))
    span = main_loop(insns)
    lines = []

    def one(title, ins):
        c = counts(ins)
        lines.append(f"{title}: {len(ins)} instructions, ALU pipe {alu(c)}, IMAD-class "
                     f"{sum(n for op, n in c.items() if op in IMAD)}")
        lines.append("  " + " ".join(f"{op}={n}" for op, n in c.most_common()))
    one(f"main loop {span[0]:#06x}..{span[1]:#06x}", body(insns, span))
    straight, skipped = guarded(insns, span)
    one("  every trip (fall-through)", straight)
    one("  behind forward branches", skipped)
    if show_all:
        for s in loops(insns):
            one(f"loop {s[0]:#06x}..{s[1]:#06x}", body(insns, s))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubin")
    ap.add_argument("--all", action="store_true", help="also every loop of the kernel")
    args = ap.parse_args(argv)
    print(report(args.cubin, args.all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
