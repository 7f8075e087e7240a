"""Model building blocks in plain PyTorch (the CPU path; kernels/ holds the Triton versions)."""
