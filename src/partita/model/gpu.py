"""The GPU's rates for the lower-bound model, from a device description (the H100's).

The shared model sees a GPU as ``sms`` cores with very wide vectors: one "vector" operation is
an SM's worth of lanes (128 FP32 lanes on an H100, four warps), loads go through the SM's L1 at
its bytes per cycle, and only BLOCK dimensions spread work over SMs (threads of a block share
one SM). An instruction fills those lanes only as far as its THREAD and VECTOR dimensions
spread it: one warp issue covers at most 32 of its iterations.
"""

from __future__ import annotations

from partita.model.bound import Rates
from partita.space.nest import CommonKind
from partita.space.temporaries import CommonPlace
from partita.targets.gpu.device import GpuCapabilities
from partita.targets.gpu.space import DimKind as GpuKind


def gpu_rates(gpu: GpuCapabilities, dtype: str = "float32") -> Rates:
    lanes = gpu.fp64_lanes_per_sm if dtype == "float64" else gpu.fp32_lanes_per_sm
    itemsize = 8 if dtype == "float64" else 4
    vector_bytes = lanes * itemsize
    return Rates(
        cores=gpu.sms, ghz=gpu.boost_ghz, vector_bytes=vector_bytes, arith_per_cycle=1.0,
        loads_per_cycle=gpu.l1_bytes_per_cycle_per_sm / vector_bytes,
        stores_per_cycle=gpu.l1_bytes_per_cycle_per_sm / vector_bytes,
        fma_latency_cycles=gpu.fma_latency_cycles,
        bandwidth_gbs=((gpu.l2_bytes, gpu.l2_gbs), (1 << 62, gpu.dram_gbs)),
        parallel_kind=GpuKind.BLOCK, register_space=CommonPlace.REGISTER,
        lane_kinds=(GpuKind.THREAD, CommonKind.VECTOR), lane_group=gpu.warp_size,
    )
