"""The engine at GPU speed (issue 27): one command that builds its own random checkpoints on the GPU and measures.

    python -m benchmarks.gpu [--parts PARTS] [--budget-s SECONDS] [--json PATH] [--work-dir DIR] [--smoke]

Parts, in the order they run (--parts picks; copy joins any part that reports a share of the bandwidth):

  copy         device-to-device copy bandwidth (1 GiB, read + write, best of 10): the "HBM" of every % below
  decode1b     Llama-3.2-1B shape, bf16: batch-1 decode (128-token prompt, 256 new tokens, greedy, ignore_eos) of
               the engine eager (enforce_eager=True), the engine with CUDA graphs, and transformers generate with
               a static cache (its automatic torch.compile); tok/s and % of HBM (bytes a step must read: every
               weight once, one embedding row, K and V at the mean context / step time, vs copy)
  decode8b     the same on the Llama-3-8B shape
  throughput   8B shape: 128 requests (prompts 32-512, outputs 16-256, random ids, ignore_eos: benchmarks/engine.py's
               workload), the engine vs transformers generate_batch given the engine's KV bytes; then 512 requests
               on the engine with its KV cache's peak usage (blocks in use / total, read after every step)
  correctness  8B shape: engine vs transformers greedy tokens (4 prompts x 32 tokens), bf16 and float32: the first
               mismatch per prompt and the reference's logit margin (top1 - top2) there
  int4         the engine with quantization="int4" (round-to-nearest at load, groups of 128) on the 1B and 8B
               bf16 checkpoints, eager (one run) and CUDA graphs: batch-1 decode as above; then the 8B's 128
               requests (throughput's workload) on the CUDA-graph engine, against the bf16 engine's when the
               throughput part ran
  awq70b       Llama-3-70B-shaped AutoAWQ INT4 GEMM checkpoint (random codes, ~40 GB): Engine.from_pretrained
               wall time, batch-1 decode and % of HBM, 64 requests (kv_cache_fraction 0.85, max_num_seqs 64)
Every many-request run (the int4 and awq70b ones) also reports its prefill and decode apart: prompt tokens / the
time of the steps that ran prompt tokens ("prefill tok/s"; decode rows of other requests may ride along in them),
and output tokens / the time of the other steps ("decode tok/s (batched)"), with the seconds and steps of each.
Before such a run (and the throughput part's), prompts of 96, 192 and 600 tokens run alone, so that Triton has
compiled every prefill path (the INT4 tl.dot's larger tiles, the dense path) before the clock starts.

Rough durations on an H100, checkpoints not yet built: ESTIMATES, except awq70b's (measured 2026-11-27):
  copy ~10 s; decode1b ~2.5 min (building 1B ~20 s, transformers' compile ~1 min); decode8b ~4 min (building 8B
  on the GPU ~1 min, mostly writing 16 GB; compile ~1.5 min); throughput ~3.5 min; correctness ~2 min (loads the 8B
  in float32 twice); int4 ~3 min (builds 1B and 8B ~1.3 min); awq70b 2.4 min measured (writing the 39.8 GB of
  shards 62 s, the load 35 s, batch-1 decode, the 64 requests 19 s). All parts: ~18 min, more than one 10-minute
  call: split them, e.g.
      --parts decode1b,decode8b --budget-s 540      (~7 min)
      --parts throughput,correctness --budget-s 540   (~6 min; builds the 8B again on a fresh machine)
      --parts int4,awq70b --budget-s 480             (~6 min: issue 40's INT4 figures)
  --budget-s skips a part whose estimate no longer fits, and any row once the budget is spent.

Checkpoints go to --work-dir (default .bench/gpu); a finished one has a marker and is reused by a later run on
the same machine. The 70B build removes the others first when the disk is short (64 GiB). Every row is printed as
it is measured and the JSON (default $OUT/gpu.json when OUT is set, else .bench/gpu.json) is rewritten after each
part: a killed run keeps what it measured. A row that fails records its error (tracebacks under details.errors)
and the run goes on. --smoke: tiny shapes (2 layers, hidden 128) end to end on CPU in float32 (CUDA graphs, the
copy bandwidth and the compiled static cache skipped, with the reason), to test the script without a GPU.
"""
