"""``axe layout`` (explain and draw) and axe.layout.picture."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from axe.cli import main
from axe.layout import parse
from axe.layout.cli import explain
from axe.layout.picture import cell_coords, draw, save

TC = "S[(8,2,4,2):(4@lane,1@warp,1@lane,1@reg)] + R[2:4@warp] + 5@warp"
S0R = "S[(2,32,128):(1@gpuid,128,1)] + R[2:2@gpuid]"
ROOT = Path(__file__).resolve().parents[1]


def test_explain_tensor_core_tile(capsys):
    assert main(["layout", TC, "--explain", "--shape", "8,16", "--rows", "3"]) == 0
    out = capsys.readouterr().out
    assert "canonical   S[(8,2,4,2):(4@lane,1@warp,1@lane,1)] + R[2:4@warp] + 5@warp" in out
    assert "128 elements (shard extents 8×2×4×2); 2 replica choice(s), 2 distinct" in out
    # spans (Lemma C.1) and value ranges per axis
    assert "warp           6  5..10" in out and "lane          32  0..31" in out and "m              2  0..1" in out
    assert "dim 0 (8): 8:4@lane; dim 1 (16): 2:1@warp 4:1@lane 2:1" in out
    rows = [line.split() for line in out.splitlines()[-6:]]
    # element (0, 2): lane 1, warps 5 and 9, register 0 (the paper's example 1)
    assert rows == [["(0,", "0)", "0", "0", "5", "0"], ["0", "9", "0"],
                    ["(0,", "1)", "1", "0", "5", "1"], ["0", "9", "1"],
                    ["(0,", "2)", "2", "1", "5", "0"], ["1", "9", "0"]]


def test_explain_without_shape_and_canonical_merge():
    out = explain(S0R, count=2)
    assert "canonical   S[(2,4096):(1@gpuid,1)] + R[2:2@gpuid]" in out
    assert "gpuid          4  0..3" in out and "grouped" not in out
    assert out.splitlines()[-5:] == ["  x  gpuid  m", "  0      0  0", "         2  0", "  1      0  1", "         2  1"]


def test_explain_reports_failed_grouping():
    out = explain("S[(3,2):(2,1)]", (2, 3))
    assert "not groupable by (2, 3)" in out


@pytest.mark.parametrize("argv, code, message", [
    (["layout", "S[(2,3):(1,2"], 2, "expected ')'"),
    (["layout", "S[(2,3):(1,2)]", "--shape", "5"], 1, "shape (5,) has 5 elements, S[(2,3):(1,2)] has 6"),
    (["layout", "S[(2,3):(1,2)]", "-o", "x.png"], 2, "-o needs --shape"),
    (["layout", "S[(2,3):(1,2)]", "--shape", "2,3", "-o", "x.gif"], 1, "use a .svg, .png or .pdf suffix"),
])
def test_cli_errors(capsys, argv, code, message):
    assert main(argv) == code
    assert message in capsys.readouterr().err


def test_bad_shape_argument(capsys):
    with pytest.raises(SystemExit):
        main(["layout", TC, "--shape", "8,a"])
    assert "expected integers separated by commas" in capsys.readouterr().err


def test_draw_colours_and_labels():
    L = parse(TC)
    cells = cell_coords(L, (8, 16), "warp")
    for i in range(8):
        for j in range(16):
            assert set(cells[i][j]) == L.map((i, j), (8, 16))
            assert [c["warp"] for c in cells[i][j]] == sorted(c["warp"] for c in cells[i][j])
    fig = draw(L, (8, 16), color="warp")
    ax = fig.axes[0]
    mesh = ax.collections[0]
    bands = mesh.get_array().reshape(16, 16)          # 8 rows x 2 replica bands, 16 columns
    values = [5, 6, 9, 10]
    for i in range(8):
        for j in range(16):
            w = (j // 8) % 2
            assert [values[int(bands[2 * i + t, j])] for t in range(2)] == [5 + w, 9 + w]
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == 256
    # cell (3, 9): lane 4*3 + (9//2)%4 = 12, register 1, two replicas
    assert texts[2 * (3 * 16 + 9):2 * (3 * 16 + 9) + 2] == ["L12 m1", "L12 m1"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["warp 5", "warp 6", "warp 9", "warp 10"]


def test_draw_large_grid_labels_regions():
    fig = draw(S0R, (64, 128), color="gpuid")
    texts = sorted(t.get_text() for t in fig.axes[0].texts)
    assert texts == ["gpuid 0 | 2\nm 0…4095", "gpuid 1 | 3\nm 0…4095"]
    assert any(p.get_hatch() for p in fig.axes[0].patches)           # the second replica, hatched


def test_draw_rejects_wrong_shape():
    with pytest.raises(ValueError, match=r"shape \(8, 8\) has 64 elements, the layout 128"):
        draw(TC, (8, 8))
    with pytest.raises(ValueError, match=r"not 1-D or 2-D"):
        draw(TC, (2, 4, 16))


def test_save_svg_and_png(tmp_path):
    svg = save(TC, (8, 16), tmp_path / "t.svg", color="warp")
    text = svg.read_text()
    assert "L31 m1" in text and "warp 10" in text and "<dc:date>" not in text
    assert save(TC, (8, 16), tmp_path / "u.svg", color="warp").read_text() == text   # reproducible
    png = save(S0R, (64, 128), tmp_path / "s.png", color="gpuid")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_draws(tmp_path, capsys):
    out = tmp_path / "tile.svg"
    assert main(["layout", TC, "--shape", "8,16", "--color", "warp", "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert "L28 m0" in out.read_text()


def test_python_dash_m_axe(tmp_path):
    out = tmp_path / "s0r.png"
    run = subprocess.run([sys.executable, "-m", "axe", "layout", S0R, "--shape", "64,128", "--color", "gpuid",
                          "-o", str(out), "--explain", "--rows", "1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == f"wrote {out}"
    assert "canonical   S[(2,4096):(1@gpuid,1)] + R[2:2@gpuid]" in run.stdout
    assert out.stat().st_size > 10_000
    bad = subprocess.run([sys.executable, "-m", "axe", "layout", "S[2:0]"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and "stride must be a non-zero int" in bad.stderr


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`axe layout ... --explain | head` stops without a BrokenPipeError traceback, exit status 0."""
    import subprocess
    import sys
    # 110 kB of output: more than a pipe holds, so the writer meets the closed pipe
    cmd = (f"{sys.executable} -m axe layout 'S[(128,512):(1@tx,1)]' --explain --shape 1,65536 --rows 4096 "
           "| head -1; echo rc=${PIPESTATUS[0]}")
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in out.stderr and "BrokenPipeError" not in out.stderr, out.stderr
    assert out.stdout.strip().endswith("rc=0"), out.stdout
