"""The gpu target: its capabilities, decision space and rates, and running printed programs.

:mod:`partita.targets.gpu.opencl` runs OpenCL kernels on the CPU through PoCL and checks them
against the numpy reference; :mod:`partita.targets.gpu.nvcc` compiles CUDA kernels to object
code (which catches every error short of running them) or to cubins;
:mod:`partita.targets.gpu.cuda` runs the cubins on a CUDA device, checks them the same way
(:mod:`partita.targets.gpu.check`) and times them. :mod:`partita.targets.gpu.target` is the
target as tuning sees it.
"""
