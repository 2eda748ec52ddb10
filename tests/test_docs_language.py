"""Every ```python block of docs/language.md runs as written (built for sm_90a where nvcc is
present): the guide cannot drift from the language."""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join(ROOT, "docs", "language.md")
BLOCKS = re.findall(r"```python\n(.*?)```", open(GUIDE).read(), re.S)


def test_the_guide_has_code():
    assert len(BLOCKS) >= 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the guide's blocks build for sm_90a with nvcc")
@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_guide_block_runs(i, tmp_path):
    # TVMScript reads a kernel's source through inspect: each block runs as a file of its own
    path = tmp_path / f"block{i}.py"
    path.write_text(BLOCKS[i])
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"docs/language.md block {i} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
