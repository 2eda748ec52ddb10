"""NeuronCore-v2 (trn1) facts the NKI model enforces and the cost model charges, each with its source.

Sources (re-read 2026-11; AWS Neuron documentation, "This document is relevant for: Inf2, Trn1"):
  [ISA]  nki.isa.nc_matmul, v2.21/v2.26 API reference
         https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/generated/nki.isa.nc_matmul.html
  [LOAD] nki.language.load / store (partition dimension first, <= tile_size.pmax)
         https://awsdocs-neuron.readthedocs-hosted.com/general/nki/api/generated/nki.language.load.html
  [ARCH] NKI programming model / NeuronCore-v2 architecture guide (SBUF 24 MiB and PSUM 2 MiB,
         128 partitions; PSUM 8 banks of 2 KiB per partition), as restated in shared/TOOLCHAIN.md
  [TRN1] trn1 instance / Trainium1 datasheet: 190 TFLOP/s bf16 per chip of 2 NeuronCores
         (about 92-95 per core), 32 GiB HBM at 820 GB/s per chip.
"""

PMAX = 128                       # [LOAD] nl.tile_size.pmax: partitions of SBUF and PSUM
SBUF_PARTITION_BYTES = 192 * 1024   # [ARCH] 24 MiB / 128 partitions
PSUM_PARTITION_BYTES = 16 * 1024    # [ARCH] 2 MiB / 128 partitions
PSUM_BANK_BYTES = 2 * 1024          # [ARCH] one bank: 2 KiB per partition (512 fp32)
PSUM_BANKS = 8                      # [ARCH]; the model allocates PSUM tiles bank by bank (assumption:
                                    # two tiles never share a bank), so 8 tiles at most
MATMUL_STATIONARY_FREE = 128        # [ISA] stationary free size <= 128 (M)
MATMUL_MOVING_FREE = 512            # [ISA] moving free size <= 512 (N)
MATMUL_CONTRACTION = PMAX           # [ISA] partition (K) <= 128, equal for both inputs
MATMUL_IN_DTYPES = ("float16", "bfloat16", "float32")   # [ISA] (fp8/tfloat32 too; axe emits these)

TENSORE_PEAK_FLOPS = 92e12     # [TRN1] bf16/fp16 dense per NeuronCore (TOOLCHAIN.md: 92 TFLOP/s)
# One nc_matmul streams the moving tile through the 128x128 array one column per cycle; the cycle
# that makes 128*128*2 flop/cycle equal the documented peak is 2*128*128/92e12 s (about 2.8 GHz).
TENSORE_CYCLE_S = 2 * 128 * 128 / TENSORE_PEAK_FLOPS
# [ISA] nki.isa.tensor_copy: "Estimated instruction cost: max(MIN_II, N) engine cycles, where N is
# the number of elements per partition"; the pages do not give MIN_II's value: 64 is our assumption.
# The same max(MIN_II, N) form is charged to every VectorE/ScalarE op and, with N the moving free
# size, to every nc_matmul.  [ISA] nki.isa.affine_select: "150 + N GpSimd Engine cycles".
MIN_INSTRUCTION_CYCLES = 64
# Assumption: VectorE and ScalarE process one element per partition per cycle at 1.4 GHz
# (NeuronCore-v2 engine clock as stated in the Neuron architecture pages; the NKI ISA pages give
# instruction costs as "N cycles" for N elements per partition).
ENGINE_HZ = 1.4e9
HBM_BYTES_PER_S = 820e9 / 2    # [TRN1] 820 GB/s per chip shared by its 2 NeuronCores
DMA_FIXED_S = 2e-6 / 16        # assumption: ~2 us DMA latency, 16 DMA queues in flight -> amortised

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "int32": 4}
