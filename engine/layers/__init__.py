"""Model building blocks: PyTorch on CPU, the Triton kernels of kernels/ on CUDA (see dispatch)."""
