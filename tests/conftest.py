"""Shared pytest setup: run Triton kernels in the interpreter when there is no GPU."""
import os

import torch

if not torch.cuda.is_available():
    # Must happen before any module defining a @triton.jit kernel is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")
torch.manual_seed(0)
