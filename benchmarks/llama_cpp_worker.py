"""A llama.cpp worker for benchmarks/quantization.py, run with an interpreter that has llama-cpp-python (it may be
another virtual environment than ours: this file imports nothing of this repository).

    <python> benchmarks/llama_cpp_worker.py MODEL.gguf THREADS

It loads the model once, prints {"ready": ...} and then answers one JSON line per command line on stdin:
- {"cmd": "decode", "prompt": [ids], "max_tokens": n}: greedy decode of n tokens (eos ignored); answers the
  decode tokens/s (tokens after the first / time after the first), the prefill time and the token ids.
- {"cmd": "serve", "requests": [[prompt ids, max_tokens], ...]}: the requests one after another (each: reset,
  prefill, greedy decode); answers output tokens, seconds and tokens/s.
Greedy is the argmax of the last logits (numpy), not llama.cpp's sampler chain: the same work our engine does.
"""
from __future__ import annotations

import json
import sys
import time


def main() -> None:
    import numpy as np
    from llama_cpp import Llama

    model_path, threads = sys.argv[1], int(sys.argv[2])
    context = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
    llm = Llama(model_path=model_path, n_threads=threads, n_threads_batch=threads, n_ctx=context, n_batch=512,
                verbose=False)
    n_vocab = llm.n_vocab()

    def argmax() -> int:
        return int(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,)).argmax())

    def run(prompt: list[int], max_tokens: int) -> tuple[list[int], float, float]:
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        tokens = [argmax()]
        first = time.perf_counter()
        while len(tokens) < max_tokens:
            llm.eval([tokens[-1]])
            tokens.append(argmax())
        return tokens, first - start, time.perf_counter() - first

    print(json.dumps({"ready": True, "n_vocab": n_vocab, "threads": threads}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "decode":
            tokens, prefill_s, decode_s = run(cmd["prompt"], cmd["max_tokens"])
            reply = {"tokens_per_s": (len(tokens) - 1) / decode_s, "prefill_s": prefill_s, "token_ids": tokens}
        elif cmd["cmd"] == "serve":
            start = time.perf_counter()
            total = 0
            for prompt, max_tokens in cmd["requests"]:
                total += len(run(prompt, max_tokens)[0])
            seconds = time.perf_counter() - start
            reply = {"output_tokens": total, "seconds": seconds, "tokens_per_s": total / seconds}
        else:
            reply = {"error": f"unknown command {cmd['cmd']!r}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
