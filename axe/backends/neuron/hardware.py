"""NeuronCore facts the NKI model enforces and the cost model charges, one :class:`Core` per
target (``trn1``: NeuronCore-v2, ``trn2``: NeuronCore-v3), each number with its source.

Sources (AWS Neuron documentation, re-read 2026-11 from the aws-neuron/aws-neuron-sdk sources of
https://awsdocs-neuron.readthedocs-hosted.com at the tags named):
  [ISA]   nki.isa.nc_matmul, v2.21/v2.26 API reference (partition <= 128, stationary free <= 128,
          moving free <= 512)  .../en/v2.26.1/nki/api/generated/nki.isa.nc_matmul.html
  [LOAD]  nki.language.load / store (partition dimension first, <= tile_size.pmax)
          .../general/nki/api/generated/nki.language.load.html
  [ARCH1] "Trainium/Inferentia2 Architecture Guide for NKI" (nki/guides/architecture/
          trainium_inferentia2_arch, v2.27.0+): SBUF 24 MiB = 128 x 192 KiB, PSUM 2 MiB = 128 x 16 KiB;
          TensorE 92 TFLOPS BF16/FP16 and 23 FP32, 2.8 GHz; VectorE 1.12 GHz, ScalarE and GpSimd
          1.4 GHz, 128 elements/cycle; MM_INIT_LATENCY 64 TensorE cycles; FP32 matmul "roughly 4x"
          the BF16 cost; VectorE "roughly N cycles" for one input tile, "roughly 2N" for two.
  [ARCH2] "Trainium2 Architecture Guide for NKI" (nki/guides/architecture/trainium2_arch, v2.27.0+):
          8 NeuronCore-v3 per device, 4 HBM stacks of 96 GiB at 3 TB/s; SBUF 28 MiB = 128 x 224 KiB,
          PSUM 2 MiB as v2; TensorE 79 BF16/FP16 and 20 FP32 dense TFLOPS, 2.4 GHz; VectorE 0.96 GHz,
          512 BF16/FP16 or 256 other elements/cycle, performance mode (tensor_copy/tensor_scalar 4x,
          tensor_tensor 2x with BF16/FP16 SBUF operands); ScalarE and GpSimd 1.2 GHz, 128/cycle;
          FP32 TensorE transpose 2x faster in transpose mode; 16 DMA engines per NeuronCore; DMA
          transpose "up to 90%" of DMA throughput; "Each DGE-based DMA instruction takes about 600 ns".
  [MIG]   "NKI Migration Guides" (nki/migration, v2.32.0), 0.1.0 -> 0.2.0: "PSUM on NeuronCore
          v2/v3/v4 is organized into 128 partitions, each consisting of 16KB ... 8 PSUM banks, with
          each bank holding up to 2KB".
  [SHARED] "NKI API Common Fields" (nki/api/nki.api.shared, v2.27.0): "MIN_II is roughly 64 engine
          cycles"; Vector Engine reciprocal "max(MIN_II, 8*N)".
  [TRN1]  trn1 instance: 820 GB/s HBM per chip of 2 NeuronCores.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Core", "CORES", "core", "TRN1", "TRN2"]


@dataclass(frozen=True)
class Core:
    """One NeuronCore generation: capacities, TensorE limits, engine clocks and rates, DMA."""

    name: str
    pmax: int                        # partitions of SBUF and PSUM
    sbuf_partition_bytes: int
    psum_partition_bytes: int
    psum_bank_bytes: int
    psum_banks: int                  # the model allocates PSUM tiles bank by bank (assumption: two
                                     # tiles never share a bank), so this many tiles at most
    matmul_stationary_free: int      # M
    matmul_moving_free: int          # N
    matmul_contraction: int          # K (BF16/FP16; FP8 double-row mode, which axe does not emit, has 256)
    tensore_peak_flops: float        # BF16/FP16 dense, one NeuronCore
    fp32_matmul_factor: float        # FP32 inputs cost this many times the BF16 cycles
    fp32_transpose_factor: float     # the same for a TensorE transpose of FP32 data
    engine_hz: dict                  # engine -> clock
    vector_lane_rate: dict           # "default" / "16bit_sbuf" / "16bit" -> elements per lane per cycle
    min_instruction_cycles: int      # MIN_II
    hbm_bytes_per_s: float           # one NeuronCore's share of the device's HBM bandwidth
    dma_fixed_s: float               # per DMA instruction, amortised over the core's DMA queues
    dma_transpose_efficiency: float  # DMA transpose throughput / DMA copy throughput (1: no DMA transpose)
    engines: tuple = ("tensor", "vector", "scalar", "gpsimd")     # [ARCH1]/[ARCH2]: 4 compute engines

    @property
    def tensore_cycle_s(self) -> float:
        """One TensorE cycle: the time that makes 2·128·128 flops per cycle the documented peak."""
        return 2 * self.pmax * self.pmax / self.tensore_peak_flops


TRN1 = Core(
    name="trn1 (NeuronCore-v2)",
    pmax=128,                                    # [LOAD] nl.tile_size.pmax
    sbuf_partition_bytes=192 * 1024,             # [ARCH1] 24 MiB / 128 partitions
    psum_partition_bytes=16 * 1024,              # [ARCH1] 2 MiB / 128 partitions
    psum_bank_bytes=2 * 1024,                    # [MIG] 8 banks of 2 KiB (512 fp32) per partition
    psum_banks=8,                                # [MIG]
    matmul_stationary_free=128, matmul_moving_free=512, matmul_contraction=128,    # [ISA]
    tensore_peak_flops=92e12,                    # [ARCH1] 92 TFLOPS BF16/FP16 (2·128·128 at 2.8 GHz)
    fp32_matmul_factor=4.0,                      # [ARCH1] FP32 "roughly 4x higher" (23 vs 92 TFLOPS)
    fp32_transpose_factor=4.0,                   # [ARCH1] a TensorE transpose is a matmul
    engine_hz={"tensor": 2.8e9, "vector": 1.12e9, "scalar": 1.4e9, "gpsimd": 1.4e9},     # [ARCH1] table
    vector_lane_rate={"default": 1, "16bit_sbuf": 1, "16bit": 1},   # [ARCH1] 128 elements/cycle = 1 per lane
    min_instruction_cycles=64,                   # [SHARED] MIN_II; [ARCH1] MM_INIT_LATENCY 64
    hbm_bytes_per_s=820e9 / 2,                   # [TRN1] 820 GB/s per chip of 2 NeuronCores
    dma_fixed_s=2e-6 / 16,                       # assumption: ~2 us DMA latency over 16 queues in flight
    dma_transpose_efficiency=0.0,                # no DMA transpose on Trainium1 ([ARCH2] introduces it)
)

TRN2 = Core(
    name="trn2 (NeuronCore-v3)",
    pmax=128,                                    # [ARCH2] 128 partitions
    sbuf_partition_bytes=224 * 1024,             # [ARCH2] 28 MiB = 128 partitions of 224 KiB
    psum_partition_bytes=16 * 1024,              # [ARCH2] "PSUM capacity remains the same at 2MiB"
    psum_bank_bytes=2 * 1024,                    # [MIG] v2/v3/v4: 8 banks of 2 KiB
    psum_banks=8,                                # [MIG]
    matmul_stationary_free=128, matmul_moving_free=512, matmul_contraction=128,   # [ARCH2] BF16: 128x128 stationary,
                                                 # 128x512 moving (K=256 only in FP8 double-row mode)
    tensore_peak_flops=79e12,                    # [ARCH2] 79 BF16/FP16 dense TFLOPS per NeuronCore-v3
    fp32_matmul_factor=79 / 20,                  # [ARCH2] 20 FP32 dense TFLOPS
    fp32_transpose_factor=79 / 20 / 2,           # [ARCH2] transpose mode: "2x speedup in FP32 transpose"
    engine_hz={"tensor": 2.4e9, "vector": 0.96e9, "scalar": 1.2e9, "gpsimd": 1.2e9},     # [ARCH2] table
    # [ARCH2] performance mode: tensor_copy/tensor_scalar 4x with BF16/FP16 operands all in SBUF, 2x
    # with one in PSUM, tensor_tensor 2x with BF16/FP16 SBUF inputs; other dtypes as NeuronCore-v2
    # (the table's "256 input/output for other data types" is not used: the text names no lift for them)
    vector_lane_rate={"default": 1, "16bit_sbuf": 4, "16bit": 2},
    min_instruction_cycles=64,                   # [SHARED] MIN_II ("roughly 64"; not restated for v3: assumed)
    hbm_bytes_per_s=3e12 / 8,                    # [ARCH2] 3 TB/s per device of 8 NeuronCores
    dma_fixed_s=600e-9 / 16,                     # [ARCH2] ~600 ns per DGE DMA instruction, 16 DMA engines
    dma_transpose_efficiency=0.9,                # [ARCH2] DMA transpose "up to 90%" of DMA throughput
)

CORES = {"trn1": TRN1, "trn2": TRN2}


def core(target: str) -> Core:
    """The :class:`Core` of a Trainium target (``trn1``, ``trn2``)."""
    if target not in CORES:
        raise ValueError(f"no NeuronCore data for target {target!r} (known: {sorted(CORES)})")
    return CORES[target]


# The schedules plan instructions with these limits; both generations share them (checked in
# tests/test_neuron_trn2.py), so one plan serves trn1 and trn2.
PMAX = TRN1.pmax
SBUF_PARTITION_BYTES = TRN1.sbuf_partition_bytes
PSUM_PARTITION_BYTES = TRN1.psum_partition_bytes
PSUM_BANK_BYTES = TRN1.psum_bank_bytes
PSUM_BANKS = TRN1.psum_banks
MATMUL_STATIONARY_FREE = TRN1.matmul_stationary_free
MATMUL_MOVING_FREE = TRN1.matmul_moving_free
MATMUL_CONTRACTION = TRN1.matmul_contraction
MATMUL_IN_DTYPES = ("float16", "bfloat16", "float32")   # [ISA] (fp8/tfloat32 too; axe emits these)
TENSORE_PEAK_FLOPS = TRN1.tensore_peak_flops
TENSORE_CYCLE_S = TRN1.tensore_cycle_s
MIN_INSTRUCTION_CYCLES = TRN1.min_instruction_cycles

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "int32": 4}
