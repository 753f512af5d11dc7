"""Running and compiling printed GPU programs, with or without a GPU.

:mod:`partita.gpu.opencl` runs OpenCL kernels on the CPU through PoCL and checks them against
the numpy reference; :mod:`partita.gpu.nvcc` compiles CUDA kernels to object code (which
catches every error short of running them) or to cubins; :mod:`partita.gpu.cuda` runs the
cubins on a CUDA device, checks them the same way (:mod:`partita.gpu.check`) and times them.
"""
