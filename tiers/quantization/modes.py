"""The quantization modes a model is loaded with (EngineConfig.quantization, Checkpoint.load_model), defined once
and importable without torch (tiers.engine.config validates options with it).

"auto": as stored (float checkpoints float, AWQ and GGUF Q4_0/Q4_1 projections 4-bit, GGUF K-quant, Q5_0, Q5_1 and
Q8_0 projections and a K-quant output tensor as stored on the native CPU kernel, other GGUF types float);
None: every projection float (4-bit ones dequantized); "int8" / "int4": every projection quantized, float ones by
round-to-nearest at load time (int4 in groups of quantization_group_size), native 4-bit ones kept as they are for
"int4" and dequantized then requantized for "int8"; GGUF types other than Q4_0/Q4_1 are dequantized then
requantized for both. How each runs: tiers.quantization.methods.
"""
QUANTIZATION_MODES = ("auto", None, "int8", "int4")
QUANTIZATION_GROUP_SIZES = (32, 64, 128, 256)  # what the INT4 kernels take (EngineConfig.quantization_group_size)
