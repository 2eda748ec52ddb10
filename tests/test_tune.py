"""``axe tune`` and the per-call choice of the GEMM op's configuration (``axe/torch/tune.py``).

Oracles: ``kernels/gemm_select.py``'s buckets and candidates walked by brute force, the on-disk
table read back, and fake timers with known medians (a pick is the lowest median over the rounds,
never one timing).
"""

import json

import pytest

from axe.torch import tune
from kernels import gemm_select


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AXE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("AXE_SHIPPED_DIRS", "")
    tune.reload()
    yield tmp_path
    tune.reload()


def test_plan_lists_every_candidate_of_every_bucket_once():
    lines = tune.plan([(4096, 14336)], "bfloat16", "col")
    assert len(lines) == len(set(lines))
    want = {tuple(sorted(tune.spec(4096, 14336, "bfloat16", "col", b, c).items()))
            for b in gemm_select.BUCKETS for c in gemm_select.candidates(b, 4096, 14336)}
    assert len(lines) == len(want)
    for line in lines:
        kernel, target, *words = line.split()
        assert kernel == tune.KERNEL and target == "sm_90a"
    for bound in (16, 64, 128):
        assert sum(f"max_rows={bound} " in line for line in lines) == len(gemm_select.candidates(bound, 4096, 14336))


def test_spec_for_uses_the_heuristic_then_a_recorded_pick(cache):
    dev = "NVIDIA H100 80GB HBM3"
    s = tune.spec_for(dev, 4096, 14336, "bfloat16", "col", 7)
    assert s == {"N": 4096, "K": 14336, "dtype": "bfloat16", "b_major": "col", "max_rows": 16,
                 **gemm_select.heuristic(7, 4096, 14336)}
    assert tune.spec_for(dev, 4096, 14336, "bfloat16", "col", 5000) == {"N": 4096, "K": 14336, "dtype": "bfloat16",
                                                                       "b_major": "col"}
    pick = {"tile_n": 64, "split_k": 2, "stages": 8}
    tune.record({tune.key(dev, "bfloat16", "col", 4096, 14336, 128): {"config": pick, "ms": 0.05, "rows": [65, 128]}})
    assert json.loads((cache / tune.TABLE).read_text())["picks"]
    for M in (65, 100, 128):
        assert tune.spec_for(dev, 4096, 14336, "bfloat16", "col", M) == {
            "N": 4096, "K": 14336, "dtype": "bfloat16", "b_major": "col", "max_rows": 128, **pick}
    assert tune.spec_for(dev, 4096, 14336, "bfloat16", "col", 64)["max_rows"] == 64       # another bucket
    # a middle bucket: its split-K pick is scheduled for the bound, a run-time-M pick is not
    assert tune.spec_for(dev, 4096, 14336, "bfloat16", "col", 129)["max_rows"] == 256
    assert "max_rows" not in tune.spec_for(dev, 14336, 4096, "bfloat16", "col", 129)
    assert "max_rows" not in tune.spec_for(dev, 4096, 14336, "bfloat16", "col", 2000)
    other = tune.spec_for("NVIDIA H200", 4096, 14336, "bfloat16", "col", 1)       # picks are per device
    assert other["split_k"] == gemm_select.heuristic(1, 4096, 14336)["split_k"]


def test_the_heuristic_weighs_each_gpus_dram_bandwidth(cache):
    """A device's noted bandwidth reaches the heuristic (GPT-3 down at one row: uncut where the DRAM is
    an H100's or unknown, spread on an H200's); noting a new one forgets the specs chosen before it;
    a recorded pick still wins over either."""
    gpt3 = (12288, 49152, "bfloat16", "col", 1)
    tune.note_device("gpu-a", 3.35e12)
    tune.note_device("gpu-b", 4.8e12)
    assert tune.spec_for("gpu-a", *gpt3)["split_k"] == 1 and "stream_k" not in tune.spec_for("gpu-a", *gpt3)
    assert tune.spec_for("gpu-b", *gpt3)["stream_k"]
    assert tune.spec_for("gpu-unknown", *gpt3) == {**tune.spec_for("gpu-a", *gpt3)}
    tune.note_device("gpu-a", 4.8e12)                       # the memo of gpu-a's specs is dropped
    assert tune.spec_for("gpu-a", *gpt3)["stream_k"]
    pick = {"tile_m": 16, "tile_n": 128, "split_k": 4, "stages": 8}
    tune.record({tune.key("gpu-b", "bfloat16", "col", 12288, 49152, 16): {"config": pick, "ms": 0.3, "rows": [1, 16]}})
    tune.reload()
    assert tune.spec_for("gpu-b", *gpt3)["split_k"] == 4


def test_dram_bandwidth_read_off_the_driver():
    """Two transfers per memory clock × the bus width, from the driver's attributes (an H100 SXM reports
    2 619 000 kHz and 5120 bits: 3.35 TB/s); a driver that reports neither gives None."""
    from axe.runtime.device import dram_bytes_per_s

    class Attr:
        CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = "clock", "bus"

    class Driver:
        class CUresult:
            CUDA_SUCCESS = 0
        CUdevice_attribute = Attr

        def __init__(self, values):
            self.values = values

        def cuInit(self, flags):
            return (0,)

        def cuDeviceGet(self, index):
            return (0, index)

        def cuDeviceGetAttribute(self, attr, dev):
            return (0, self.values[attr]) if attr in self.values else (1, None)

        def cuGetErrorName(self, err):
            return (0, b"CUDA_ERROR_INVALID_VALUE")

        def cuGetErrorString(self, err):
            return (0, b"invalid argument")

    assert dram_bytes_per_s(0, Driver({"clock": 2619000, "bus": 5120})) == 2 * 2619e6 * 5120 / 8 == 3.35232e12
    assert dram_bytes_per_s(0, Driver({"clock": 2619000})) is None
    assert dram_bytes_per_s(0, Driver({"clock": 0, "bus": 5120})) is None


def test_record_merges(cache):
    tune.record({"a": {"config": {}, "ms": 1.0, "rows": [8192]}})
    tune.record({"b": {"config": {"tile_n": 128}, "ms": 2.0, "rows": [256]}})
    assert set(json.loads((cache / tune.TABLE).read_text())["picks"]) == {"a", "b"}


def test_measure_takes_medians_over_interleaved_rounds():
    calls = []

    def timer(name, values):
        it = iter(values)
        return lambda: (calls.append(name), next(it))[1]
    # "x" has the single fastest timing, "y" the lower median
    ms = tune.measure({"x": timer("x", [0.1, 5.0, 5.0, 5.0]), "y": timer("y", [1.0, 1.0, 1.0, 1.0])}, 4)
    assert ms == {"x": 5.0, "y": 1.0} and min(ms, key=ms.get) == "y"
    assert calls == ["x", "y"] * 4                 # round robin
    with pytest.raises(ValueError, match="at least 3"):
        tune.measure({"x": lambda: 1.0}, 2)


def test_cli_plan(capsys):
    from axe.cli import main
    assert main(["tune", "gemm", "plan", "--shapes", "1024x4096", "--buckets", "128"]) == 0
    out = capsys.readouterr().out.split("\n")
    assert all(line.startswith(tune.KERNEL) for line in out if line)
    with pytest.raises(SystemExit):
        main(["tune", "gemm", "plan", "--shapes", "1024-4096"])
    assert "is not NxK" in capsys.readouterr().err


def test_trusted_leaves_out_builds_that_spill():
    assert tune.trusted({"resources": {"spill_stores": 0, "spill_loads": 0}})
    assert tune.trusted({})                     # a launch.json without a ptxas report: nothing known to spill
    assert not tune.trusted({"resources": {"spill_stores": 4, "spill_loads": 4}})
    assert not tune.trusted({"resources": {"spill_stores": 0, "spill_loads": 8}})


def test_run_never_picks_a_candidate_left_without_timer(cache):
    """A candidate the timers leave out (its build spills: :func:`tune.graph_timers` gives it no
    timer) is never the pick, even where it would be the fastest, and the log names it; a bucket
    whose every candidate is left out is an error naming it."""
    shape, bound, logs = (4096, 14336), 16, []
    names = [gemm_select.name(c) for c in gemm_select.candidates(bound, *shape)]
    fastest, spilling = names[0], names[0]

    def timers(kernel, specs, M, N, K, dtype, layout):
        ms = {n: (0.5 if n == fastest else 1.0 + i) for i, n in enumerate(specs)}
        return {n: (lambda v=v: v) for n, v in ms.items() if n != spilling}
    tune.run([shape], "bfloat16", "col", [bound], 3, log=logs.append, device="GPU", timers=timers)
    pick = json.loads((cache / tune.TABLE).read_text())["picks"][tune.key("GPU", "bfloat16", "col", *shape, bound)]
    assert gemm_select.name(pick["config"]) == names[1]
    assert any(spilling in line and "left out" in line for line in logs)
    with pytest.raises(RuntimeError, match="every candidate's build spills"):
        tune.run([shape], "bfloat16", "col", [bound], 3, log=logs.append, device="GPU",
                 timers=lambda *a: {})
