"""Running and compiling printed GPU programs without a GPU.

:mod:`partita.gpu.opencl` runs OpenCL kernels on the CPU through PoCL and checks them against
the numpy reference; :mod:`partita.gpu.nvcc` compiles CUDA kernels to object code, which
catches every error short of running them.
"""
