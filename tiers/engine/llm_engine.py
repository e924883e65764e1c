"""The engine: validates requests, runs the scheduler/model step loop, and hands outputs to callers.

`generate` steps inline on the caller's thread; `stream` (async) starts one background thread that steps while
any request is unfinished, so concurrent streams and generate calls share every step.
"""
from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Sequence as Seq

import torch

from tiers.engine.block_manager import BlockManager
from tiers.engine.config import EngineConfig
from tiers.engine.detokenizer import Detokenizer, find_stop
from tiers.engine.model_runner import ModelRunner, resolve_dtype
from tiers.engine.outputs import EngineStats, RequestOutput
from tiers.engine.sampling_params import InvalidRequestError, SamplingParams
from tiers.engine.scheduler import Scheduler
from tiers.engine.sequence import Sequence
from tiers.models.config import ModelConfig
from tiers.spec_decode.draft_runner import DraftRunner, kv_bytes_per_block as draft_kv_bytes_per_block
from tiers.spec_decode.speculator import Speculator, load_draft

logger = logging.getLogger(__name__)

Prompt = str | list[int]


class Engine:
    def __init__(self, path: str | Path, config: EngineConfig, draft: "str | Path | Engine | None" = None) -> None:
        """draft: with config.speculative == "draft", the draft model: a checkpoint folder, or another Engine
        whose loaded weights are shared (this engine keeps its own KV pool for them)."""
        self.path = Path(path)
        self.config = config
        self.model_config = ModelConfig.from_pretrained(self.path)
        self.tokenizer = _load_tokenizer(self.path)
        self.detokenizer = Detokenizer(self.tokenizer) if self.tokenizer is not None else None
        draft_model, draft_config = self._load_draft(draft)
        extra_kv = 0
        if draft_config is not None:
            dtype = resolve_dtype(config.dtype, torch.device(config.device), self.model_config)
            extra_kv = draft_kv_bytes_per_block(draft_config, config.block_size, dtype)
        self.runner = ModelRunner(self.path, self.model_config, config, extra_kv)
        self.max_model_len = self._resolve_max_model_len()
        self.runner.model.build_rotary(self.max_model_len + 1, self.runner.device)
        self.speculator: Speculator | None = None
        if config.speculative is not None:
            draft_runner = None
            if draft_model is not None:
                r = self.runner
                draft_runner = DraftRunner(draft_model, draft_config, r.num_blocks, config.block_size, r.device,
                                           r.dtype, r.attention_backend, self.max_model_len + 1)
            self.speculator = Speculator(config.speculative, config.num_speculative_tokens,
                                         config.speculative_adaptive, draft_runner, config.ngram_min, config.ngram_max,
                                         config.max_num_batched_tokens)
        self.block_manager = BlockManager(self.runner.num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(self.block_manager, config.max_num_seqs, config.max_num_batched_tokens)
        self.eos_token_ids = set(self.model_config.eos_token_ids)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            self.eos_token_ids.add(self.tokenizer.eos_token_id)
        self._rng = random.Random(config.seed)
        self._seqs: dict[str, Sequence] = {}
        self._pending: deque[Sequence] = deque()
        self._pending_aborts: deque[str] = deque()
        self._lock = threading.RLock()
        self._work = threading.Condition(self._lock)
        self._loop_thread: threading.Thread | None = None
        self._closed = False
        self.num_steps = 0

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str = "cpu", dtype: str | None = None, block_size: int = 16,
                        kv_cache_bytes: int | None = None, max_num_seqs: int = 256, max_model_len: int | None = None,
                        draft: "str | Path | Engine | None" = None, speculative: str | None = None,
                        num_speculative_tokens: int = 4, **kwargs: Any) -> "Engine":
        """speculative: "draft" (the default when `draft` is given), "ngram" or None."""
        if speculative is None and draft is not None:
            speculative = "draft"
        return cls(path, EngineConfig(device=device, dtype=dtype, block_size=block_size, kv_cache_bytes=kv_cache_bytes,
                                      max_num_seqs=max_num_seqs, max_model_len=max_model_len, speculative=speculative,
                                      num_speculative_tokens=num_speculative_tokens, **kwargs), draft=draft)

    def _load_draft(self, draft: Any) -> tuple[Any, ModelConfig | None]:
        speculative = self.config.speculative
        if speculative != "draft":
            if draft is not None:
                raise ValueError(f"a draft model was given, but speculative={speculative!r}: use speculative='draft'")
            return None, None
        if draft is None:
            raise ValueError("speculative='draft' needs a draft model: draft=<checkpoint folder or Engine>")
        device = torch.device(self.config.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' was asked for, but CUDA is not available")
        dtype = resolve_dtype(self.config.dtype, device, self.model_config)
        return load_draft(draft, self.path, self.model_config, self.tokenizer, device, dtype)

    def _resolve_max_model_len(self) -> int:
        capacity = self.runner.num_blocks * self.config.block_size
        limit = self.model_config.max_position_embeddings
        if self.model_config.sliding_window:
            limit = min(limit, self.model_config.sliding_window)
        if self.config.max_model_len is not None:
            if self.config.max_model_len > limit:
                raise ValueError(f"max_model_len {self.config.max_model_len} exceeds the model's limit of {limit} "
                                 "tokens (max_position_embeddings / sliding_window)")
            if self.config.max_model_len > capacity:
                raise ValueError(f"max_model_len {self.config.max_model_len} does not fit in the KV cache "
                                 f"({capacity} tokens): raise kv_cache_bytes or lower max_model_len")
            return self.config.max_model_len
        if capacity < limit:
            logger.warning("max_model_len lowered from %d to %d tokens to fit the KV cache", limit, capacity)
        return min(limit, capacity)

    # ---- requests -------------------------------------------------------------------------------------------

    def add_request(self, prompt: Prompt, params: SamplingParams | None = None, request_id: str | None = None,
                    priority: int = 0, on_output: Callable[[RequestOutput], None] | None = None,
                    stream: bool = False) -> str:
        """Queues a request; the next step picks it up. Raises InvalidRequestError for bad input.
        priority: lower is served first (the quality monitor replays at a higher number)."""
        seq = self._make_sequence(prompt, params or SamplingParams(), request_id, priority, on_output, stream)
        self._submit([seq])
        return seq.request_id

    def _make_sequence(self, prompt: Prompt, params: SamplingParams, request_id: str | None, priority: int,
                       on_output: Callable[[RequestOutput], None] | None, stream: bool) -> Sequence:
        if not isinstance(params, SamplingParams):
            raise InvalidRequestError(f"params must be SamplingParams, got {type(params).__name__}")
        token_ids = self._tokenize(prompt)
        if len(token_ids) > self.max_model_len:
            raise InvalidRequestError(f"the prompt has {len(token_ids)} tokens, more than this model's maximum "
                                      f"context length of {self.max_model_len} tokens")
        if not isinstance(priority, int):
            raise InvalidRequestError(f"priority must be an integer, got {priority!r}")
        request_id = request_id or uuid.uuid4().hex
        generator = None
        if not params.greedy:
            seed = params.seed if params.seed is not None else self._rng.getrandbits(63)
            generator = self.runner.make_generator(seed)
        return Sequence(request_id, token_ids, params, priority=priority, on_output=on_output, stream=stream,
                        generator=generator)

    def _tokenize(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidRequestError("the prompt is empty")
            if self.tokenizer is None:
                raise InvalidRequestError(f"{self.path} has no tokenizer: pass token ids instead of text")
            token_ids = self.tokenizer.encode(prompt)
        elif isinstance(prompt, (list, tuple)):
            token_ids = list(prompt)
            if any(isinstance(t, bool) or not isinstance(t, int) for t in token_ids):
                raise InvalidRequestError("a token-id prompt must be a list of integers")
            vocab = self.model_config.vocab_size
            bad = [t for t in token_ids if not 0 <= t < vocab]
            if bad:
                raise InvalidRequestError(f"token id {bad[0]} is outside the vocabulary [0, {vocab})")
        else:
            raise InvalidRequestError(f"a prompt is a string or a list of token ids, got {type(prompt).__name__}")
        if not token_ids:
            raise InvalidRequestError("the prompt is empty")
        return token_ids

    def _submit(self, seqs: list[Sequence]) -> None:
        with self._lock:
            for seq in seqs:
                if seq.request_id in self._seqs or any(p.request_id == seq.request_id for p in self._pending):
                    raise InvalidRequestError(f"request id {seq.request_id!r} is already in use")
            self._pending.extend(seqs)
            self._work.notify_all()

    def abort(self, request_id: str) -> None:
        """Stops a request (no-op if it already finished); its blocks are freed on the next step."""
        self._pending_aborts.append(request_id)
        with self._lock:
            self._work.notify_all()

    def has_unfinished_requests(self) -> bool:
        return bool(self._pending or self._pending_aborts or self.scheduler.has_unfinished())

    # ---- the step -------------------------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        with self._lock:
            outputs: list[RequestOutput] = []
            self._admit_pending(outputs)
            spec = self.speculator
            if spec is not None:
                spec.plan(self.scheduler, self.max_model_len)
            sched = self.scheduler.schedule()
            if not sched.scheduled:
                assert not self.scheduler.has_unfinished(), "requests are waiting but none can be scheduled"
                return outputs
            self.num_steps += 1
            try:
                if spec is not None:
                    spec.propose(sched.scheduled)
                    start = time.perf_counter()
                num_spec = [s.num_spec_tokens for s in sched.scheduled]
                sampled = self.runner.execute(sched.scheduled)
                if spec is not None:
                    spec.observe_target(sched.num_tokens, time.perf_counter() - start)
            except Exception as exc:  # a failed step fails its own requests, never the engine
                logger.exception("engine step failed")
                for s in sched.scheduled:
                    self._finish(s.seq, "error", outputs, error=f"{type(exc).__name__}: {exc}")
                return outputs
            for i, s in enumerate(sched.scheduled):
                seq = s.seq
                was_decoding = seq.num_output_tokens > 0 and s.num_new_tokens == 1 + num_spec[i]
                seq.num_computed_tokens += s.num_new_tokens
                out = sampled.get(i)
                if out is None:
                    continue
                if spec is not None and (out.num_draft_tokens or was_decoding):
                    spec.verified(seq, out.num_draft_tokens, out.num_accepted)
                for token, logprob in zip(out.token_ids, out.logprobs):
                    self._append_token(seq, token, logprob, outputs)
                    if seq.is_finished:
                        break
            return outputs

    def _admit_pending(self, outputs: list[RequestOutput]) -> None:
        while self._pending:
            seq = self._pending.popleft()
            self._seqs[seq.request_id] = seq
            self.scheduler.add(seq)
        while self._pending_aborts:
            seq = self._seqs.get(self._pending_aborts.popleft())
            if seq is not None and not seq.is_finished:
                self._finish(seq, "abort", outputs)

    def _append_token(self, seq: Sequence, token: int, logprob, outputs: list[RequestOutput]) -> None:
        seq.token_ids.append(token)
        if logprob is not None:
            seq.logprobs.append(logprob)
        params = seq.params
        reason: str | None = None
        if token in params.stop_token_ids:
            reason, seq.stop_reason = "stop", token
        elif not params.ignore_eos and token in self.eos_token_ids:
            reason = "stop"
        delta = ""
        if self.detokenizer is not None and (seq.stream or params.stop):
            delta = self.detokenizer.update(seq)
            if reason is None and params.stop:
                stop = find_stop(seq, len(delta))
                if stop is not None:
                    reason, seq.stop_reason = "stop", stop
        if reason is None and (seq.num_output_tokens >= params.max_tokens or seq.num_tokens >= self.max_model_len):
            reason = "length"
        if reason is not None:
            self._finish(seq, reason, outputs)
        elif seq.stream:
            self._emit(seq, outputs)

    def _finish(self, seq: Sequence, reason: str, outputs: list[RequestOutput], error: str | None = None) -> None:
        self.scheduler.finish(seq, reason, discard_cached=reason == "error")
        self._seqs.pop(seq.request_id, None)
        if self.detokenizer is not None and not (seq.stream or seq.params.stop):
            seq.text = self.detokenizer.decode(seq.output_token_ids, seq.params.skip_special_tokens)
        self._emit(seq, outputs, error)

    def _emit(self, seq: Sequence, outputs: list[RequestOutput], error: str | None = None) -> None:
        text_end = len(seq.text)
        if not seq.is_finished and seq.params.stop:
            # A stop string may be forming at the end: hold those characters back until it is decided.
            text_end = max(seq.num_text_sent, text_end - max(len(s) for s in seq.params.stop) + 1)
        out = RequestOutput(
            request_id=seq.request_id, prompt_token_ids=seq.prompt_token_ids, token_ids=seq.output_token_ids,
            text=seq.text[:text_end], finished=seq.is_finished, finish_reason=seq.finish_reason,
            stop_reason=seq.stop_reason, new_token_ids=seq.token_ids[seq.num_prompt_tokens + seq.num_tokens_sent:],
            delta_text=seq.text[seq.num_text_sent:text_end],
            logprobs=list(seq.logprobs) if seq.params.logprobs is not None else None,
            num_cached_tokens=seq.num_cached_tokens, queue_time_s=seq.queue_time, error=error)
        seq.num_text_sent, seq.num_tokens_sent = text_end, seq.num_output_tokens
        outputs.append(out)
        if seq.on_output is not None:
            try:
                seq.on_output(out)
            except Exception:  # e.g. the consumer's event loop is gone: never let it break the step
                logger.exception("output callback of request %s failed", seq.request_id)

    # ---- front ends -----------------------------------------------------------------------------------------

    def generate(self, prompts: Prompt | Seq[Prompt], params: SamplingParams | Seq[SamplingParams] | None = None,
                 priority: int = 0) -> list[RequestOutput]:
        """Runs the prompts to completion and returns one finished output per prompt, in order."""
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = list(prompts)
        if isinstance(params, (list, tuple)):
            if len(params) != len(prompts):
                raise InvalidRequestError(f"got {len(params)} SamplingParams for {len(prompts)} prompts")
            param_list = list(params)
        else:
            param_list = [params or SamplingParams()] * len(prompts)
        results: dict[str, RequestOutput] = {}
        done = threading.Event()

        def collect(out: RequestOutput) -> None:
            if out.finished:
                results[out.request_id] = out
                if len(results) == len(seqs):
                    done.set()

        seqs = [self._make_sequence(p, sp, None, priority, collect, False) for p, sp in zip(prompts, param_list)]
        if not seqs:
            return []
        self._submit(seqs)
        while not done.is_set():
            if self._loop_thread is not None and self._loop_thread.is_alive():
                done.wait(0.1)
            else:
                self.step()
        errors = [r for r in results.values() if r.finish_reason == "error"]
        if errors:
            raise RuntimeError(f"generation failed: {errors[0].error}")
        return [results[s.request_id] for s in seqs]

    async def stream(self, prompt: Prompt, params: SamplingParams | None = None, request_id: str | None = None,
                     priority: int = 0) -> AsyncIterator[RequestOutput]:
        """Yields an output per generated token (delta_text / new_token_ids), the last one with finished=True.
        Closing the iterator early aborts the request."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        seq = self._make_sequence(prompt, params or SamplingParams(), request_id, priority,
                                  lambda out: loop.call_soon_threadsafe(queue.put_nowait, out), True)
        self._submit([seq])
        self._ensure_loop_thread()
        finished = False
        try:
            while not finished:
                out = await queue.get()
                finished = out.finished
                if out.finish_reason == "error":
                    raise RuntimeError(f"generation failed: {out.error}")
                yield out
        finally:
            if not finished:
                self.abort(seq.request_id)

    def _ensure_loop_thread(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the engine is closed")
            if self._loop_thread is None or not self._loop_thread.is_alive():
                self._loop_thread = threading.Thread(target=self._run_loop, name="tiers-engine", daemon=True)
                self._loop_thread.start()

    def _run_loop(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self.has_unfinished_requests():
                    self._work.wait()
                if self._closed:
                    return
            try:
                self.step()
            except Exception as exc:  # a bug outside the model step: fail everyone rather than hang the streams
                logger.exception("engine loop failed")
                self._fail_all(f"{type(exc).__name__}: {exc}")

    def _fail_all(self, error: str) -> None:
        with self._lock:
            self._admit_pending([])
            for seq in list(self._seqs.values()):
                if not seq.is_finished:
                    self._finish(seq, "error", [], error=error)

    def close(self) -> None:
        """Stops the background loop; unfinished requests are aborted."""
        with self._lock:
            self._closed = True
            self._work.notify_all()
            for request_id in list(self._seqs):
                self._pending_aborts.append(request_id)
            self._admit_pending([])
        if self._loop_thread is not None:
            self._loop_thread.join(timeout=10)

    @property
    def is_healthy(self) -> bool:
        """False once closed."""
        return not self._closed

    def stats(self) -> EngineStats:
        bm = self.block_manager
        used = bm.num_blocks - bm.num_free_blocks
        return EngineStats(num_blocks=bm.num_blocks, num_free_blocks=bm.num_free_blocks, num_used_blocks=used,
                           kv_cache_usage=used / bm.num_blocks, num_running=len(self.scheduler.running),
                           num_waiting=len(self.scheduler.waiting) + len(self._pending),
                           prefix_cache_hit_rate=bm.prefix_hit_rate, num_preemptions=self.scheduler.num_preemptions,
                           num_steps=self.num_steps,
                           speculative=self.speculator.stats() if self.speculator is not None else None)

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise InvalidRequestError(f"{self.path} has no chat template")
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)


def _load_tokenizer(path: Path):
    if not ((path / "tokenizer.json").is_file() or (path / "tokenizer.model").is_file()):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))
