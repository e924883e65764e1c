"""The C signatures of the native library's entry points (w4a8.c, kquant.c, ops.c, layer.c, read_bound.c), declared
once when it is loaded."""
from __future__ import annotations

import ctypes

I64, PTR, INT, FLOAT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_float


def declare_ops(lib: ctypes.CDLL) -> None:
    lib.aio_isa.restype = ctypes.c_char_p
    for gemm in (lib.aio_gemm_w4, lib.aio_gemm_w8, lib.aio_gemm_w8f):
        gemm.argtypes = [PTR, I64, I64, I64, PTR, I64, PTR, I64, INT]
        gemm.restype = INT
    lib.aio_rmsnorm.argtypes = [PTR, I64, PTR, PTR, I64, I64, FLOAT, INT]
    lib.aio_rmsnorm.restype = None
    lib.aio_silu_mul.argtypes = [PTR, PTR, I64, I64, INT]
    lib.aio_silu_mul.restype = None
    lib.aio_argmax_prob.argtypes = [PTR, I64, I64, PTR, PTR, PTR]
    lib.aio_argmax_prob.restype = None
    lib.aio_argmax.argtypes = [PTR, I64, I64, I64, PTR]
    lib.aio_argmax.restype = None
    lib.aio_paged_attention.argtypes = [PTR, I64, PTR, I64, PTR, I64, PTR, PTR, PTR, I64, PTR, PTR, PTR, I64, INT, INT,
                                        INT, INT, FLOAT, PTR, INT]
    lib.aio_paged_attention.restype = INT
    lib.aio_rotary.argtypes = [PTR, I64, I64, INT, INT, PTR, PTR]
    lib.aio_rotary.restype = None
    lib.aio_llama_layer.argtypes = [PTR, PTR, I64, PTR, PTR, PTR, PTR, INT, PTR, PTR, PTR, PTR, I64, INT]
    lib.aio_llama_layer.restype = INT
    lib.aio_llama_layers.argtypes = [PTR, INT, PTR, I64, PTR, PTR, I64, PTR, PTR, PTR, INT, PTR, PTR, PTR, PTR, I64, PTR,
                                     FLOAT, PTR, INT]
    lib.aio_llama_layers.restype = INT
    lib.aio_kq_row_bytes.argtypes = [INT, I64]
    lib.aio_kq_row_bytes.restype = I64
    lib.aio_kq_blocked_from.argtypes = []
    lib.aio_kq_blocked_from.restype = I64
    lib.aio_kq_repack.argtypes = [PTR, I64, I64, INT]
    lib.aio_kq_repack.restype = INT
    lib.aio_kq_dequantize_dense.argtypes = [PTR, I64, I64, INT, PTR, INT, INT]
    lib.aio_kq_dequantize_dense.restype = INT
    lib.aio_kq_gather_rows.argtypes = [PTR, I64, I64, INT, PTR, I64, PTR]
    lib.aio_kq_gather_rows.restype = INT
    lib.aio_gemm_kq.argtypes = [PTR, I64, I64, I64, PTR, I64, INT, PTR, I64, INT]
    lib.aio_gemm_kq.restype = INT
    lib.aio_gemm_kq_parts.argtypes = [PTR, I64, I64, I64, INT, PTR, PTR, PTR, PTR, I64, INT]
    lib.aio_gemm_kq_parts.restype = INT
    lib.aio_read_bytes.argtypes = [PTR, I64, INT, INT]
    lib.aio_read_bytes.restype = ctypes.c_uint64
    lib.aio_kq_time_calls.argtypes = [PTR, I64, I64, INT, PTR, PTR, PTR, I64, PTR, INT, PTR]
    lib.aio_kq_time_calls.restype = ctypes.c_double
