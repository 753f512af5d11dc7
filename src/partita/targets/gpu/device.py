"""GPU device descriptions. The H100 figures come from NVIDIA's public documentation.

Sources: "NVIDIA H100 Tensor Core GPU Architecture" whitepaper (2022) and the CUDA C++
Programming Guide, "Compute Capabilities" table for compute capability 9.0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


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
    # H100 whitepaper: 132 SMs on the SXM5 product.
    sms=132,
    warp_size=32,
    # Vector loads and stores of 2 or 4 elements (float2/float4).
    vector_sizes=(2, 4),
    # Code-size cap on the product of unrolled dimensions around an instruction.
    max_unroll=512,
)
