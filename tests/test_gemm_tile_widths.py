"""Tile widths in steps of 16 (``tile_n`` a multiple of 16 from 64 to 256 with column-major B,
kernels/gemm_config.py ``TILE_N_COL``): the sm_90a builds with M at run time and cut in K for a
bound compile with no spills; the PTX holds wgmma with the tile's width as its N; C's stores are
64-column TMA boxes whose column offsets, read off the CUDA source, cover each tile's columns; the
configurations these widths are not built for are refused naming the argument."""

import math
import os
import re

import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from kernels import gemm  # noqa: E402
from kernels.gemm_config import EPILOGUE, TILE_N, TILE_N_COL, Config, narrow_chunk  # noqa: E402
from kernels.parts.epilogues.store import ChunkedStore, chunking  # noqa: E402
from kernels.parts.mainloops.tma_wgmma import Cooperative, MulticastB, WholeB  # noqa: E402

WIDTHS = (112, 144, 160, 176, 208, 224, 240)
N, K = 2000, 512            # a ragged last block-column at every width; eight k-blocks
#: the builds: M at run time (the persistent schedule reads the tile count at launch), and split-K
#: in 2 slices scheduled for at most 512 rows
MODES = {"runtime": {}, "split_k2": {"max_rows": 512, "split_k": 2}}
STORE = "cp_async_bulk_tensor_s2g_async_bulk_tensor_2d_global_shared__cta_tile_bulk_group("


def store_columns(src, width):
    """Per store site (the tile-column variable the site's coordinates use), the column offsets
    within the tile of its TMA stores into C, read off the CUDA source's calls."""
    sites = {}
    for var, off in re.findall(rf"\(&\(C_map\)\)\)\), \(*(\w+\[0\]) \* {width}\)(?: \+ (\d+)\))?,", src):
        sites.setdefault(var, []).append(int(off or 0))
    return sites


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("width", WIDTHS)
def test_width_builds(width, mode):
    art = gemm.build_dynamic(N, K, "bfloat16", "col", tile_n=width, **MODES[mode])
    r = art.launch["resources"]
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack"] == 0, r
    assert {"C7510", "C7507", "C7508"}.isdisjoint(re.findall(r"C75\d\d", art.log)), art.log
    # one wgmma shape, the tile's width as its N
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", art.ptx)) == {f"m64n{width}k16"}
    maps = {m["param"]: m for m in art.launch["tensormaps"]}
    assert maps["B_map"]["box"] == [64, width] and maps["B_map"]["swizzle"] == 128      # N×K rows, K inner
    assert maps["C_map"]["box"] == [64, 64] and maps["C_map"]["swizzle"] == 128
    sites = store_columns(art.cuda_source, width)
    assert sites, "no TMA store into C found"
    for var, offs in sites.items():
        covered = set()
        for c in offs:
            assert 0 <= c and c + 64 <= width, (var, offs)          # inside the tile: no neighbour's column
            covered |= set(range(c, c + 64))
        assert covered == set(range(width)), (var, offs)
        assert len(offs) == math.ceil(width / 64), (var, offs)
    assert art.ptx.count("cp.async.bulk.tensor.2d.global.shared::cta") >= math.ceil(width / 64)


@pytest.mark.parametrize("width", TILE_N_COL)
def test_chunks_cover_the_part(width):
    """The store's chunks (epilogue columns each, the rest as the part's last 64 columns) cover a
    warpgroup's part exactly, each one a buffer's worth or less, and the tile fits shared memory at
    the default stages."""
    main = Cooperative("bfloat16", "col", 128, width, 64, 4, 16, 0, WholeB())
    e = narrow_chunk(width) if width % 64 else math.gcd(EPILOGUE["wgmma"], width)
    store = ChunkedStore(main, None, "bfloat16", e)
    spans = [store.span(j) for j in range(store.chunks)]
    assert store.chunks == (width - width % 64) // e + (width % 64 > 0)
    cols = [c for c0, w in spans for c in range(c0, c0 + w)]
    assert set(cols) == set(range(width)) and all(0 <= c0 and c0 + w <= width and w <= e for c0, w in spans)
    assert len(cols) - width == (64 - width % 64) % 64          # the overlap: the last chunk's, only
    assert (main.smem + store.smem) * 2 <= gemm.SMEM_LIMIT


def test_chunking_law():
    assert chunking(128, 176) == (2, 1) and chunking(64, 176) == (3, 2) and chunking(64, 240) == (4, 2)
    assert chunking(64, 80) == (2, 1) and chunking(128, 144) == (2, 1)
    for bad in ((128, 240), (96, 176), (64, 40), (64, 120)):
        with pytest.raises(ValueError, match="epilogue chunk"):
            chunking(*bad)


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match=r"tile_n=176 .*b_major='row'"):
        gemm.make(1000, 2000, 512, "bfloat16", "row", tile_n=176)
    for bad in (100, 72, 272, 48):
        with pytest.raises(ValueError, match=rf"tile_n must be .*got {bad}"):
            Config(tile_n=bad)
    assert Config(tile_n=176, cluster=2).cluster == 2      # column-major B: each CTA of a pair loads 88 rows
    for kw, named in (({"schedule": "pingpong"}, "pingpong"), ({"stream_k": True}, "stream_k"),
                      ({"epilogue_ops": ("bias",)}, "epilogue_ops")):
        with pytest.raises(ValueError, match=rf"tile_n=176 .*{named}"):
            Config(tile_n=176, **kw)
    with pytest.raises(ValueError, match=r"decode tile .*tile_n=128"):
        Config(tile_n=176, tile_m=16)
    with pytest.raises(ValueError, match=r"bn=176"):
        gemm.make(1000, 2048, 512, "bfloat16", "col", tile_n=176, act="silu_mul")
    with pytest.raises(ValueError, match=r"b_major='row'"):
        Cooperative("bfloat16", "row", 128, 176, 64, 4, 8, 0, WholeB())
    assert Cooperative("bfloat16", "col", 128, 176, 64, 4, 8, 0, MulticastB()).b_half == (88, 64)
    with pytest.raises(ValueError, match=r"CTA pairs .*rows of 8.*got 136 columns"):
        Cooperative("bfloat16", "col", 128, 136, 64, 4, 8, 0, MulticastB())
    with pytest.raises(ValueError, match=r"CTA pairs .*64-column.*got 192 columns with b_major='row'"):
        Cooperative("bfloat16", "row", 128, 192, 64, 4, 8, 0, MulticastB())
    assert TILE_N == (64, 128, 192, 256) and set(TILE_N) < set(TILE_N_COL)


def test_existing_widths_keep_their_chunks():
    """Widths of whole 64-column blocks keep the wgmma chunk (no default store chunk is set for them)."""
    for w in TILE_N:
        assert Config(tile_n=w).epilogue is None
    assert Config(tile_n=176).epilogue == 128 and Config(tile_n=240).epilogue == 64
    assert Config(tile_n=176, epilogue=64).epilogue == 64


def test_distributed_kernels_refuse_narrow_widths():
    from kernels import ag_gemm, gemm_rs
    with pytest.raises(ValueError, match=r"gemm_rs: tile_n must be one of .*got 176"):
        gemm_rs.make(4096, 4096, 4096, 2, tile_n=176)
    with pytest.raises(ValueError, match=r"ag_gemm: tile_n must be one of .*got 176"):
        ag_gemm.make(4096, 4096, 4096, 2, tile_n=176)
