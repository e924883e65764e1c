"""A Llama decoder layer as one native call (tiers/native/layer.c): its weights' pointers gathered once into the
C struct, then one call per layer and step instead of a dozen Python-level ops."""
from __future__ import annotations

import ctypes
import weakref

import torch

from tiers.native.build import NativeKernelError, NativeLibrary
from tiers.native.ops import MAX_HEAD_DIM

KINDS = {"cpu_w4a8": 0, "cpu_w8a8": 1, "cpu_w8a32": 2, "cpu_kq": 3}  # layer.c's KIND_*


class KQWeightStruct(ctypes.Structure):
    """layer.c's aio_kq_weight: a cpu_kq projection's parts (pointers, row counts, GGUF type ids)."""
    _fields_ = [("nparts", ctypes.c_int64), ("ws", ctypes.c_void_p), ("ns", ctypes.c_void_p),
                ("types", ctypes.c_void_p)]


class LayerStruct(ctypes.Structure):
    _fields_ = [("hidden", ctypes.c_int64), ("num_heads", ctypes.c_int64), ("num_kv_heads", ctypes.c_int64),
                ("head_dim", ctypes.c_int64), ("intermediate", ctypes.c_int64), ("eps_in", ctypes.c_float),
                ("eps_post", ctypes.c_float), ("scale", ctypes.c_float), ("norm_in", ctypes.c_void_p),
                ("norm_post", ctypes.c_void_p), ("w_qkv", ctypes.c_void_p), ("w_o", ctypes.c_void_p),
                ("w_gate_up", ctypes.c_void_p), ("w_down", ctypes.c_void_p), ("kind_qkv", ctypes.c_int32),
                ("kind_o", ctypes.c_int32), ("kind_gate_up", ctypes.c_int32), ("kind_down", ctypes.c_int32),
                ("bias_qkv", ctypes.c_void_p)]


class NativeLayer:
    """The struct for one decoder layer, and the tensors it points into (kept alive with it)."""

    def __init__(self, layer: torch.nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        projections, norms = _parts(layer)
        self.projections = projections
        bias = projections[0].bias
        self.tensors = [p.qweight for p in projections if p.kernel != "cpu_kq"] + list(norms) + [bias]
        self.kq_structs: list[KQWeightStruct] = []
        weights = [self._kq_weight(p) if p.kernel == "cpu_kq" else p.qweight.data_ptr() for p in projections]
        self.struct = LayerStruct(
            layer.input_layernorm.weight.shape[0], attn.num_heads, attn.num_kv_heads, attn.head_dim,
            mlp.intermediate_size, layer.input_layernorm.eps, layer.post_attention_layernorm.eps, attn.attn.scale,
            norms[0].data_ptr(), norms[1].data_ptr(), *weights, *(KINDS[p.kernel] for p in projections),
            bias.data_ptr() if bias is not None else None)

    def _kq_weight(self, projection: torch.nn.Module) -> int:
        """The address of a cpu_kq projection's aio_kq_weight, kept alive with this layer."""
        ptrs, ns, types, nparts = projection.kq_arrays()
        struct = KQWeightStruct(nparts, ctypes.addressof(ptrs), ctypes.addressof(ns), ctypes.addressof(types))
        self.kq_structs.append(struct)
        return ctypes.addressof(struct)

    def runs(self, rows: int) -> bool:
        """Whether a step of `rows` rows runs here: not when a projection hands that many to its dense path."""
        return _kernels_take(self.projections, rows)

    @staticmethod
    def supports(layer: torch.nn.Module) -> bool:
        """Every projection on a native kernel, without bias but for a float32 q/k/v bias; float32 norms."""
        projections, norms = _parts(layer)
        qkv_bias = projections[0].bias
        return (all(getattr(p, "kernel", None) in KINDS for p in projections)
                and all(p.bias is None for p in projections[1:])
                and (qkv_bias is None or (qkv_bias.dtype == torch.float32 and qkv_bias.is_contiguous()))
                and all(n.dtype == torch.float32 and n.is_contiguous() for n in norms)
                and layer.self_attn.head_dim <= MAX_HEAD_DIM)

    def forward(self, native: NativeLibrary, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor,
                tables: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """x float32 [T, hidden] contiguous: updated in place and returned."""
        token_seq, visible, block_tables = tables
        status = native.lib.aio_llama_layer(
            ctypes.byref(self.struct), x.data_ptr(), x.shape[0], rope[0].data_ptr(), rope[1].data_ptr(),
            k_cache.data_ptr(), v_cache.data_ptr(), k_cache.shape[1], slot_mapping.data_ptr(),
            token_seq.data_ptr(), visible.data_ptr(), block_tables.data_ptr(), block_tables.shape[1],
            torch.get_num_threads())
        _check(status)
        return x


class NativeStack:
    """A model's decoder layers, every one a NativeLayer, as one native call per step (aio_llama_layers): the rotary
    rows of the step's positions, every layer and the final norm, with the Python-level call, checks and argument
    conversion paid once per step."""

    def __init__(self, layers: list[NativeLayer]) -> None:
        self.layers = layers
        self.projections = tuple(p for layer in layers for p in layer.projections)
        self.structs = (ctypes.c_void_p * len(layers))(*(ctypes.addressof(layer.struct) for layer in layers))
        # id of the first layer's K cache view -> (id of its list, K and V cache addresses), forgotten with that
        # view: a KV cache dropped while the model lives on (a draft's, whose model is another engine's) is freed
        self._kv_arrays: dict[int, tuple[int, ctypes.Array, ctypes.Array]] = {}

    def runs(self, rows: int) -> bool:
        """Every layer's runs(rows), over all their projections at once: it is asked every step, after the weights'
        stream has left Python's code and data out of cache (a call per layer: 12 us warm, 3.4 us this way; the
        step's checks 0.16 -> 0.10 ms in the engine)."""
        return _kernels_take(self.projections, rows)

    def forward(self, native: NativeLibrary, x: torch.Tensor, rope_tables: tuple[torch.Tensor, torch.Tensor],
                positions: torch.Tensor, kv_caches: list[tuple[torch.Tensor, torch.Tensor]], slot_mapping: torch.Tensor,
                tables: tuple[torch.Tensor, torch.Tensor, torch.Tensor], norm: tuple[torch.Tensor, float]
                ) -> torch.Tensor:
        """x float32 [T, hidden] contiguous (the embeddings: updated in place); rope_tables: (cos, signed sin)
        float32 [positions, head_dim] contiguous, looked up at `positions` (int64 [T]); kv_caches: layer i's (k,
        v) caches at index i; norm: the final norm's float32 weight and eps. Returns norm(the last layer's x)."""
        token_seq, visible, block_tables = tables
        k_caches, v_caches = self._kv_pointers(kv_caches)
        out = torch.empty_like(x)
        cos, sin = rope_tables
        status = native.lib.aio_llama_layers(
            self.structs, len(self.layers), x.data_ptr(), x.shape[0], cos.data_ptr(), sin.data_ptr(), cos.shape[0],
            positions.data_ptr(), k_caches, v_caches, kv_caches[0][0].shape[1], slot_mapping.data_ptr(),
            token_seq.data_ptr(), visible.data_ptr(), block_tables.data_ptr(), block_tables.shape[1],
            norm[0].data_ptr(), norm[1], out.data_ptr(), torch.get_num_threads())
        _check(status)
        return out

    def _kv_pointers(self, kv_caches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[ctypes.Array, ctypes.Array]:
        """The layers' K and V cache addresses as C arrays, built once per cache list (a KV cache's list of layer
        views never changes; a model drafting for another engine's target steps with two lists)."""
        first = kv_caches[0][0]
        entry = self._kv_arrays.get(id(first))
        if entry is None or entry[0] != id(kv_caches):
            n = len(self.layers)
            if entry is None:
                weakref.finalize(first, self._kv_arrays.pop, id(first), None)
            entry = (id(kv_caches), (ctypes.c_void_p * n)(*(kv[0].data_ptr() for kv in kv_caches[:n])),
                     (ctypes.c_void_p * n)(*(kv[1].data_ptr() for kv in kv_caches[:n])))
            self._kv_arrays[id(first)] = entry
        return entry[1], entry[2]


def _kernels_take(projections: tuple[torch.nn.Module, ...], rows: int) -> bool:
    """Whether every projection runs `rows` rows on its own kernel: none hands that many to its dense path
    (QuantizedLinear.dense_min_rows, read each time: it may be switched on loaded weights)."""
    for p in projections:
        limit = p.dense_min_rows
        if limit is not None and rows >= limit:
            return False
    return True


def _check(status: int) -> None:
    if status == -3:
        raise NativeKernelError("a token's position lies past the rotary table")
    if status:
        raise NativeKernelError("out of memory in the native decoder layer" if status == -1 else
                                "a projection's kernel does not take its weight's block type or shape")


def _parts(layer: torch.nn.Module) -> tuple[tuple[torch.nn.Module, ...], tuple[torch.Tensor, torch.Tensor]]:
    """(qkv, o, gate_up, down projections; the two norms' weights), in layer.c's order."""
    attn, mlp = layer.self_attn, layer.mlp
    return ((attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj),
            (layer.input_layernorm.weight, layer.post_attention_layernorm.weight))
