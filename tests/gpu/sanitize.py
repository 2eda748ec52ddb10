#!/usr/bin/env python3
"""Run the GPU checks under NVIDIA compute-sanitizer and print one table: kernel × tool.

On the GPU machine (no TVM there), for each tool (memcheck, racecheck, synccheck, initcheck) one
process runs ``tests/gpu/run_all.py`` (or, with ``--dist``, ``tests/gpu/run_dist.py`` under
torchrun, one sanitized process per GPU) over the carried artifacts; the tools run side by side.
Every error the sanitizer reports is attributed to the kernel it names (axe kernels are
``<artifact>_kernel``; an error in another kernel — torch's, cuBLAS's — is listed under
"(not axe)"); a check that fails under a tool counts too.  Cells: ``ok`` (the check passed and
no error names the kernel), ``N err`` (sanitizer errors), ``FAIL`` (the check failed), ``-``
(not reached before the tool's time limit).  Logs go to ``--out`` (``$OUT`` on the device tool);
the table is printed and written to ``sanitize-single-table.txt`` there (``sanitize-dist-table.txt``
with ``--dist``).  Exit 1 when any cell is not ok.

Usage: ``python3 tests/gpu/sanitize.py [--tools memcheck,racecheck] [--only NAME ...]
[--dist] [--limit SECONDS] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
#: options per tool: memcheck without the leak report (torch's caching allocator keeps memory by design)
#: and none reports API calls that return an error code (torch probes driver entry points that way);
#: an axe launch that fails fails its check instead
TOOL_ARGS = {t: ["--report-api-errors", "no"] for t in ("memcheck", "racecheck", "synccheck", "initcheck")}
TOOL_ARGS["memcheck"] += ["--leak-check", "no"]
_PREFIX = "========="
_KERNEL = re.compile(r"(?<![\w:])([A-Za-z0-9_]+)_kernel\b(?!<)")    # axe's kernels: C names, no namespace
_ROW = re.compile(r"^([A-Za-z_](?:[\w:]*\w)?)\s+(?:(\d+)\s+)?(ok|FAIL|MISSING|NOCHECK)\s")   # run_dist rows carry the rank
#: a host API call that returned an error code (not a kernel's access): torch probes optional driver
#: entry points with cuGetProcAddress; an axe launch that fails fails its check instead
_API = re.compile(r"Program hit \S+ .* on CUDA API call to (\w+)")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def sanitizer_command(tool: str, log: str, kernels: str = "") -> list[str]:
    """The compute-sanitizer prefix for ``tool``: errors are reported, never fatal (the run goes on
    to the next kernel), reports go to ``log``; ``%p`` in ``log`` becomes the process id.
    ``kernels``: check only kernels whose name holds this substring (the others run unchecked)."""
    only = ["--kernel-name", f"kns={kernels}"] if kernels else []
    return ["compute-sanitizer", "--tool", tool, "--print-limit", "200", "--log-file", log, *only, *TOOL_ARGS[tool]]


def kernel_owners(art_dir: str) -> dict[str, str]:
    """``{kernel name without "_kernel": artifact label}`` of the artifacts in ``art_dir``: each
    artifact's own name, and the kernel its ``launch.json`` names (a case's artifact may hold a
    kernel named otherwise, e.g. ``moeop_gptoss_combine`` holds ``moe_combine_bfloat16_kernel``);
    a kernel held by several artifacts is labelled with all of them, joined by ``|``."""
    import json
    owners: dict[str, set] = {}
    for name in sorted(os.listdir(art_dir)):
        owners.setdefault(name, set()).add(name)
        try:
            with open(os.path.join(art_dir, name, "launch.json")) as f:
                kernel = json.load(f).get("kernel", "")
        except (OSError, ValueError):
            continue
        if kernel.endswith("_kernel") and kernel[:-len("_kernel")] != name:
            owners.setdefault(kernel[:-len("_kernel")], set()).add(name)
    return {k: "|".join(sorted(v - {k}) or [k]) for k, v in owners.items()}


def parse_report(text: str, known=None) -> tuple[dict[str, list[str]], list[int]]:
    """The sanitizer log ``text`` → ({kernel artifact name or "(not axe)": [error headline, ...]},
    [each process's ERROR SUMMARY count]).  An error is a ``=========`` line that does not
    continue a block (continuations are indented); it belongs to the first ``<name>_kernel`` in its
    block (a C name outside any namespace): the artifact ``known`` maps that name to
    (:func:`kernel_owners`), or the name itself when ``known`` is None."""
    errors: dict[str, list[str]] = {}
    summaries = [int(m.group(1)) for m in _SUMMARY.finditer(text)]
    block: list[str] = []

    def close():
        if not block:
            return
        head = block[0]
        api = _API.search(head)
        names = [m.group(1) if known is None else known[m.group(1)] for line in block
                 for m in _KERNEL.finditer(line) if known is None or m.group(1) in known]
        key = f"(host API: {api.group(1)})" if api else names[0] if names else "(not axe)"
        errors.setdefault(key, []).append(head)
        block.clear()

    for line in text.splitlines():
        if not line.startswith(_PREFIX):
            continue
        body = line[len(_PREFIX):]
        if not body.strip() or "ERROR SUMMARY" in body or body.lstrip().startswith(("COMPUTE-SANITIZER", "Target application")):
            close()
            continue
        if body.startswith(" " * 2) and block:     # an indented continuation of the current error
            block.append(body)
            continue
        close()
        if re.match(r"\s*(Invalid|Error|Race|Barrier|Uninitialized|Program hit|Misaligned|Out-of-range|Warning)", body):
            block.append(body.strip())
    close()
    return errors, summaries


def parse_results(stdout: str) -> dict[str, str]:
    """The runner's rows → {artifact: "ok" | "FAIL" | ...}: a later row for the same kernel and
    rank replaces an earlier one (a re-run after a fix), and a kernel failed if it failed on any
    rank.  Cases started but never ended (the tool's time ran out) are absent."""
    last = {}
    for line in stdout.splitlines():
        m = _ROW.match(line.strip())
        if m:
            last[(m.group(1).split(":")[-1], m.group(2))] = m.group(3)
    res = {}
    for (name, _rank), status in last.items():
        if res.get(name, "ok") == "ok":
            res[name] = status
    return res


def table(names: list[str], tools: list[str], results: dict, errors: dict) -> tuple[str, bool]:
    """The kernel × tool table and whether every axe kernel's cell is ok (reports in other kernels —
    torch's, cuBLAS's, NCCL's — get a row of their own and do not count)."""
    width = max([len(n) for n in names] + [12])
    lines = [f"{'kernel':{width}s}  " + "  ".join(f"{t:>10s}" for t in tools)]
    clean = True
    for n in names + ["(not axe)"]:          # "(host API: ...)" records are listed below the table, not failed
        cells = []
        for t in tools:
            errs = len(errors[t].get(n, []))
            status = results[t].get(n) if n != "(not axe)" else "ok"
            if errs:
                cell = f"{errs} err"
            elif status is None:
                cell = "-"
            elif status != "ok":
                cell = status
            else:
                cell = "ok"
            if n != "(not axe)":      # other libraries' kernels are listed, not judged: the table is about axe's
                clean &= cell == "ok"
            cells.append(cell)
        if n == "(not axe)" and all(c == "ok" for c in cells):
            continue
        lines.append(f"{n:{width}s}  " + "  ".join(f"{c:>10s}" for c in cells))
    return "\n".join(lines), clean


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--dist", action="store_true", help="the multi-GPU checks, under torchrun")
    ap.add_argument("--limit", type=float, default=520.0, help="seconds per tool (they run side by side)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/axe-sanitize"))
    ap.add_argument("--kernels", default="",
                    help="check only kernels whose name holds this substring (e.g. dist_): NCCL's, NVSHMEM's and "
                         "torch's kernels then run unchecked")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: tabulate the .out/.log files already in --out; runs merged there are read in "
                         "name order (sanitize-single-racecheck.1.out, .2.out, ...), a later row replacing an earlier one")
    ap.add_argument("--runner-args", default="", help="more arguments for run_all.py / run_dist.py, one string")
    args = ap.parse_args(argv)
    tools = [t for t in args.tools.split(",") if t]
    bad = [t for t in tools if t not in TOOLS]
    if bad:
        ap.error(f"unknown tool(s) {bad}; choose from {TOOLS}")
    os.makedirs(args.out, exist_ok=True)
    tag = "dist" if args.dist else "single"
    version = "" if args.report_only else subprocess.run(["compute-sanitizer", "--version"], capture_output=True,
                                                         text=True).stdout.strip()
    print(f"{datetime.datetime.now().isoformat(timespec='seconds')}  {version.splitlines()[-1] if version else '?'}",
          flush=True)
    only = (["--only", *args.only] if args.only else []) + args.runner_args.split()
    procs = {}
    for i, t in enumerate([] if args.report_only else tools):
        log = os.path.join(args.out, f"sanitize-{tag}-{t}-%p.log")
        if args.dist:
            import torch
            n = torch.cuda.device_count()
            cmd = ["torchrun", "--nproc-per-node", str(n), "--master-port", str(29500 + 17 * (i + 1)), "--no-python",
                   *sanitizer_command(t, log, args.kernels),
                   sys.executable, os.path.join(ROOT, "tests", "gpu", "run_dist.py"), *only]
        else:
            cmd = [*sanitizer_command(t, log, args.kernels), sys.executable, os.path.join(ROOT, "tests", "gpu", "run_all.py"), *only]
        out = open(os.path.join(args.out, f"sanitize-{tag}-{t}.out"), "w")
        procs[t] = (subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True),
                    out, time.time())
        print(f"started {t}: {' '.join(cmd)}", flush=True)
    for t, (p, out, t0) in procs.items():
        try:
            p.wait(timeout=max(1.0, args.limit - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)       # torchrun's workers too
            p.wait()
            print(f"{t}: time limit {args.limit:.0f} s reached; kernels not reached show '-'", flush=True)
        out.close()
        print(f"{t}: exit {p.returncode} after {time.time() - t0:.0f} s", flush=True)
    art_dir = os.path.join(ROOT, ".carry", "artifacts")
    known = kernel_owners(art_dir) if os.path.isdir(art_dir) else None
    results, errors, names = {}, {}, set()
    for t in tools:
        stdout = ""
        for fn in sorted(os.listdir(args.out)):     # sanitize-single-memcheck.out, ...-memcheck.2.out (merged runs)
            if fn.startswith(f"sanitize-{tag}-{t}.") and fn.endswith(".out"):
                with open(os.path.join(args.out, fn)) as f:
                    stdout += f.read()
        results[t] = parse_results(stdout)
        names |= set(results[t])
        text = ""
        for fn in sorted(os.listdir(args.out)):
            if fn.startswith(f"sanitize-{tag}-{t}-") and fn.endswith(".log"):
                with open(os.path.join(args.out, fn)) as f:
                    text += f.read()
        errors[t], _ = parse_report(text, known)
        names |= {n for n in errors[t] if not n.startswith("(")}
    if args.only:
        names |= set(args.only)
    text, clean = table(sorted(names), tools, results, errors)
    print(text)
    for t in tools:
        for n, heads in sorted(errors[t].items()):
            print(f"{t} {n}: {heads[0]}" + (f" (+{len(heads) - 1} more)" if len(heads) > 1 else ""))
    with open(os.path.join(args.out, f"sanitize-{tag}-table.txt"), "w") as f:
        f.write(text + "\n")
    others = sum(len(errors[t].get("(not axe)", [])) for t in tools)
    print(("all clean" if clean else "NOT clean") + f": {len(names)} axe kernels x {len(tools)} tools"
          + (f"; {others} reports in other libraries' kernels (listed above)" if others else ""), flush=True)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
