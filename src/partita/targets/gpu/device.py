"""GPU device descriptions. The H100 figures come from NVIDIA's public documentation.

Sources: "NVIDIA H100 Tensor Core GPU Architecture" whitepaper (2022) and the CUDA C++
Programming Guide, "Compute Capabilities" table for compute capability 9.0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

CUDA_LOCAL_BYTES_PER_THREAD = 512 * 1024
"""Local memory a thread may use on every architecture since compute capability 2.0 (CUDA C++
Programming Guide, "Technical Specifications per Compute Capability")."""


@dataclass(frozen=True)
class GpuCapabilities:
    """Limits the GPU decision space is parameterised by."""

    name: str
    arch: str
    max_threads_per_block: int
    max_thread_dims: int
    max_block_dims: int
    shared_bytes_per_block: int
    sms: int
    warp_size: int
    vector_sizes: tuple[int, ...]
    max_unroll: int
    max_loop_copies: int = 16
    """Copies of a LOOP dimension's for loop in the unrolled dims around it (see the H100)."""
    boost_ghz: float = 0.0
    fp32_lanes_per_sm: int = 0
    fp64_lanes_per_sm: int = 0
    l1_bytes_per_cycle_per_sm: int = 0
    dram_gbs: float = 0.0
    l2_bytes: int = 0
    l2_gbs: float = 0.0
    fma_latency_cycles: float = 0.0
    max_block_dims_size: tuple[int, int, int] = (1024, 1024, 64)
    """Threads per block along x, y and z (every CUDA compute capability)."""
    max_grid: tuple[int, int, int] = (2 ** 31 - 1, 65535, 65535)
    """Blocks along x, y and z (compute capability 3.0 and later)."""
    registers_per_thread: int = 255
    registers_per_block: int = 65536
    max_blocks_per_sm: int = 32
    """Blocks resident on an SM at once."""
    max_warps_per_sm: int = 64
    max_threads_per_sm: int = 2048
    registers_per_sm: int = 65536
    shared_bytes_per_sm: int = 228 * 1024
    schedulers_per_sm: int = 4
    """Warp instructions an SM issues per cycle at most (one per scheduler)."""
    shared_bytes_per_cycle_per_sm: int = 128
    """Shared memory: 32 banks of 4 bytes, each serving one access per cycle."""
    sector_bytes: int = 32
    """The unit in which global memory moves between L1, L2 and DRAM."""
    local_bytes_per_thread: int = CUDA_LOCAL_BYTES_PER_THREAD
    """Local memory per thread: where the arrays of REGISTER temporaries live when indexed by
    loop counters (the driver refuses a launch that asks for more)."""

    def to_json(self) -> dict:
        return asdict(self)


H100 = GpuCapabilities(
    name="NVIDIA H100 SXM5",
    arch="sm_90",
    # CUDA Programming Guide, compute capability 9.0: max threads per block.
    max_threads_per_block=1024,
    # threadIdx.x/y/z and blockIdx.x/y/z: three hardware dimensions each.
    max_thread_dims=3,
    max_block_dims=3,
    # Compute capability 9.0: 227 KiB of shared memory per block (opt-in maximum).
    shared_bytes_per_block=227 * 1024,
    # Compute capability 9.0: 1024 x 1024 x 64 threads and 2^31-1 x 65535 x 65535 blocks;
    # 255 registers per thread and 64 K 32-bit registers per block.
    max_block_dims_size=(1024, 1024, 64),
    max_grid=(2 ** 31 - 1, 65535, 65535),
    registers_per_thread=255,
    registers_per_block=65536,
    # Compute capability 9.0: at most 32 resident blocks, 64 resident warps and 2048 resident
    # threads per SM; 64 K 32-bit registers and 228 KiB of shared memory per SM.
    max_blocks_per_sm=32,
    max_warps_per_sm=64,
    max_threads_per_sm=2048,
    registers_per_sm=65536,
    shared_bytes_per_sm=228 * 1024,
    # Whitepaper, SM architecture: four partitions, each with one warp scheduler dispatching
    # one warp instruction per clock.
    schedulers_per_sm=4,
    # CUDA Programming Guide, shared memory of compute capability 5.x and later: 32 banks of
    # 4 bytes, each bank one 32-bit word per clock.
    shared_bytes_per_cycle_per_sm=128,
    # CUDA C++ Best Practices Guide, coalesced access: global memory is accessed in 32-byte
    # sectors; a warp's access moves every sector its threads touch.
    sector_bytes=32,
    # CUDA Programming Guide, compute capability 9.0: 512 KiB of local memory per thread.
    local_bytes_per_thread=CUDA_LOCAL_BYTES_PER_THREAD,
    # H100 whitepaper: 132 SMs on the SXM5 product.
    sms=132,
    warp_size=32,
    # Vector loads and stores of 2 or 4 elements (float2/float4).
    vector_sizes=(2, 4),
    # Code-size cap on the product of unrolled dimensions around an instruction.
    max_unroll=512,
    # Build-time cap: nvcc's time grows with the for loops a kernel prints (sm_90 builds of
    # random matmul 1024^3 implementations: 1,035 loops 30 s, 1,608 loops 64 s, 15 loops
    # 3 s at 12,253 lines); a LOOP printed inside unrolled dims is repeated once per copy.
    # 16 copies per loop keep a kernel of 15 loop dims under 240 loops.
    max_loop_copies=16,
    # H100 SXM5 datasheet: max boost clock 1980 MHz.
    boost_ghz=1.98,
    # Whitepaper, SM architecture: 128 FP32 and 64 FP64 lanes per SM (4 partitions of 32 and
    # 16); 132 SMs x 128 lanes x 2 flop x 1.98 GHz = 67 TFLOP/s, the datasheet's FP32 figure.
    fp32_lanes_per_sm=128,
    fp64_lanes_per_sm=64,
    # Whitepaper: the combined L1/shared memory delivers 128 bytes per clock per SM at most
    # (one 32-lane access of 4 bytes each cycle).
    l1_bytes_per_cycle_per_sm=128,
    # Datasheet: HBM3 at 3.35 TB/s on the SXM5 product; a 50 MB L2.
    dram_gbs=3350.0,
    l2_bytes=50 * 1024 * 1024,
    # No official L2 bandwidth figure; published micro-benchmarks of H100 measure about
    # 5.5 TB/s, so twice that is a safe upper bound for a lower-bound model.
    l2_gbs=11000.0,
    # Dependent FP32 FMAs issue every 4 cycles on Hopper-class SMs (micro-benchmark papers
    # report 4; a lower latency would only weaken the bound).
    fma_latency_cycles=4.0,
)


H200 = replace(
    H100,
    name="NVIDIA H200 SXM",
    # H200 datasheet: the same GH100 SMs, clocks and limits as the H100 SXM5, with 141 GB of
    # HBM3e at 4.8 TB/s; its driver reports a 60 MB L2. A bound priced at the H100's 3.35 TB/s
    # would exceed what a streaming kernel takes on it.
    dram_gbs=4800.0,
    l2_bytes=60 * 1024 * 1024,
)

DESCRIPTIONS = (H200, H100)
"""The devices described, the most specific name first."""


def capabilities_of(device_name: str | None) -> GpuCapabilities:
    """The description of the device the driver names ``device_name`` ("NVIDIA H200",
    "NVIDIA H100 80GB HBM3"): the H200's figures for an H200, else the H100's (the space and
    the bound are planned for Hopper-class devices)."""
    name = (device_name or "").upper()
    for desc in DESCRIPTIONS:
        if desc.name.split()[1] in name:
            return desc
    return H100
