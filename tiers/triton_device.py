"""Where this process can run AIO's Triton kernels: CUDA tensors compiled, CPU tensors only in Triton's interpreter.

Triton decides between the two when a kernel is defined (`@triton.jit` at import): TRITON_INTERPRET=1 set before
then gives interpreted kernels, which run on CPU tensors; otherwise they are compiled for the GPU and a CPU tensor
fails deep inside the launch ("Pointer argument ... cannot be accessed from Triton (cpu tensor?)"). One process
is one or the other, so the wrappers ask here first and raise a clear ValueError instead.
"""
from __future__ import annotations

import torch


def interpreted(kernel: object) -> bool:
    """Whether `kernel` (a module-level @triton.jit function) runs in Triton's interpreter in this process."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # a Triton without an interpreter
        return False
    return isinstance(kernel, InterpretedFunction)


def unavailable(device: torch.device, kernel: object) -> str | None:
    """Why `kernel` cannot run on tensors of `device` in this process, or None if it can."""
    if device.type == "cuda":
        return None
    if device.type == "cpu":
        if interpreted(kernel):
            return None
        return ("on CPU the Triton kernels run only in Triton's interpreter, and this process has them compiled "
                "(TRITON_INTERPRET=1 must be set before triton is imported)")
    return f"the Triton kernels run on CUDA (or on CPU in Triton's interpreter), not on {device.type}"
