"""Every code block of docs/language.md runs as written: the guide cannot drift from the language.

``python`` blocks run as files of their own (TVMScript reads a kernel's source through
``inspect``), each in a fresh folder; ``bash`` blocks run in the repository root with the venv's
``axe`` first on ``PATH``.  A block whose fence is preceded by ``<!-- not run: REASON -->`` is
not run (the guide keeps such blocks rare); ``text`` blocks are printed output.  All blocks run
in one child process, in order, so TVM is imported once (the whole guide takes ~1 minute on 2
cores); each block's outcome is its own test.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join(ROOT, "docs", "language.md")
FENCE = re.compile(r"(?:<!-- not run: (?P<why>[^>]*?) -->\s*\n)?```(?P<lang>\w*)\n(?P<code>.*?)```", re.S)
ALL = [(m.group("lang"), m.group("code"), m.group("why")) for m in FENCE.finditer(open(GUIDE).read())]
BLOCKS = [(lang, code) for lang, code, why in ALL if lang in ("python", "bash") and why is None]
NOT_RUN = [(lang, why) for lang, _, why in ALL if why is not None]

#: runs the blocks listed in argv[1] (a JSON file) one after another and records each outcome
RUNNER = r'''
import contextlib, io, json, os, runpy, subprocess, sys, time, traceback
todo = json.load(open(sys.argv[1]))
results = []
for b in todo:
    out, t0, ok = io.StringIO(), time.time(), True
    try:
        if b["lang"] == "python":
            os.chdir(os.path.dirname(b["path"]))
            sys.path.insert(0, os.path.dirname(b["path"]))
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                runpy.run_path(b["path"], run_name="__main__")
            sys.path.remove(os.path.dirname(b["path"]))
        else:
            r = subprocess.run(["bash", "-euo", "pipefail", b["path"]], cwd=b["root"], capture_output=True, text=True)
            out.write(r.stdout + r.stderr)
            ok = r.returncode == 0
    except BaseException:
        ok = False
        out.write(traceback.format_exc())
    results.append({"ok": ok, "output": out.getvalue()[-6000:], "seconds": round(time.time() - t0, 2)})
    json.dump(results, open(sys.argv[2], "w"))
'''


def test_the_guide_has_code():
    assert len(BLOCKS) >= 12
    assert len(NOT_RUN) <= 2, f"blocks marked not run: {NOT_RUN}"
    for lang, _, why in ALL:
        assert lang in ("python", "bash", "text"), f"a ```{lang} block: the guide's fences are python, bash or text"


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guide")
    todo = []
    for i, (lang, code) in enumerate(BLOCKS):
        d = tmp / f"block{i}"
        d.mkdir()
        path = d / (f"block{i}.py" if lang == "python" else f"block{i}.sh")
        path.write_text(code)
        todo.append({"lang": lang, "path": str(path), "root": ROOT})
    (tmp / "todo.json").write_text(json.dumps(todo))
    (tmp / "runner.py").write_text(RUNNER)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([sys.executable, str(tmp / "runner.py"), str(tmp / "todo.json"), str(tmp / "results.json")],
                       cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    results = json.loads((tmp / "results.json").read_text()) if (tmp / "results.json").exists() else []
    print("docs/language.md blocks, seconds:", [x["seconds"] for x in results])
    return results, r


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the guide's blocks build for sm_90a with nvcc")
@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_guide_block_runs(i, outcomes):
    results, proc = outcomes
    assert i < len(results), (f"docs/language.md block {i} did not run (the runner stopped):\n"
                              f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    assert results[i]["ok"], f"docs/language.md block {i} ({BLOCKS[i][0]}) failed:\n{results[i]['output']}"
