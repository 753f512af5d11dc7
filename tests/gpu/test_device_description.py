"""The device descriptions the gpu target plans and bounds with."""

from __future__ import annotations

import partita
from partita.model.gpu import gpu_rates
from partita.targets.gpu.device import H100, H200, capabilities_of


def test_the_driver_names_pick_their_descriptions() -> None:
    assert capabilities_of("NVIDIA H200") is H200
    assert capabilities_of("NVIDIA H100 80GB HBM3") is H100
    assert capabilities_of("NVIDIA H100 PCIe") is H100
    # Another device is planned as the H100 (the space is Hopper's), not refused.
    assert capabilities_of("NVIDIA A100-SXM4-80GB") is H100
    assert capabilities_of(None) is H100


def test_an_h200_bounds_a_stream_below_an_h100() -> None:
    """The H200 differs from the H100 in its memory: the same SMs, limits and clocks, a
    faster HBM, so a streaming kernel's bound is lower there and its compute bound the same."""
    assert (H200.sms, H200.boost_ghz, H200.shared_bytes_per_block, H200.max_threads_per_block) \
        == (H100.sms, H100.boost_ghz, H100.shared_bytes_per_block, H100.max_threads_per_block)
    axpy = partita.kernel("axpy", n=1 << 26)
    space = partita.space(axpy, target="gpu")
    root = space.root()
    h100 = partita.model.bound.Model(gpu_rates(H100)).bound(root).time_s
    h200 = partita.model.bound.Model(gpu_rates(H200)).bound(root).time_s
    # axpy's root is bound by its stream from memory alone: the ratio of the bandwidths.
    assert abs(h200 / h100 - H100.dram_gbs / H200.dram_gbs) < 1e-6
