"""The engine's front end: builds the model runner, scheduler and speculator from an EngineConfig, takes requests
in, runs the step (tiers/engine/core.py) in a loop, and hands outputs to callers.

`generate` steps inline on the caller's thread; `stream` (async) starts one background thread that steps while
any request is unfinished, so concurrent streams and generate calls share every step.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Hashable, Sequence as Seq

from tiers.attention.selector import get_attention_backend
from tiers.engine.block_manager import BlockManager
from tiers.engine.config import EngineConfig
from tiers.engine.detokenizer import Detokenizer
from tiers.engine.core import EngineCore
from tiers.engine.errors import ENGINE_FAILED, failure
from tiers.engine.inbox import Inbox
from tiers.engine.kv_cache import kv_bytes_per_block, resolve_max_model_len
from tiers.engine.model_runner import ModelRunner
from tiers.engine.output_processor import OutputProcessor
from tiers.engine.outputs import EngineStats, RequestOutput
from tiers.engine.processor import InputProcessor, Prompt
from tiers.engine.sampling_params import SamplingParams, StructuredOutputParams
from tiers.engine.scheduler import Scheduler
from tiers.engine.sequence import Sequence
from tiers.engine.turnstile import Turnstile
from tiers.models.checkpoint import open_checkpoint
from tiers.models.config import ModelConfig
from tiers.models.gguf.reader import GGUFCheckpoint
from tiers.models.llama import LlamaForCausalLM
from tiers.models.loader import resolve_device, resolve_dtype
from tiers.engine.spec_decode.draft_model import DraftTarget, load_draft_model, share_draft_model
from tiers.engine.spec_decode.draft_runner import DraftRunner
from tiers.engine.spec_decode.speculator import Speculator

logger = logging.getLogger(__name__)


class Engine:
    def __init__(self, path: str | Path | GGUFCheckpoint, config: EngineConfig,
                 draft: str | Path | Engine | None = None) -> None:
        """path: a Hugging Face folder (float or AutoAWQ), a .gguf file, or a GGUFCheckpoint from load_gguf (to
        share one parse). draft: with config.speculative == "draft", a checkpoint folder / .gguf file, or another
        Engine whose loaded weights are shared (this engine keeps its own KV pool for them)."""
        checkpoint = open_checkpoint(path)
        self.path = checkpoint.path
        self.config = config
        self.model_config = checkpoint.config
        self.tokenizer = checkpoint.tokenizer
        device = resolve_device(config.device)
        dtype = resolve_dtype(config.dtype, device, self.model_config, checkpoint.is_quantized(config.quantization),
                              config.quantized_kernel)
        draft_model = _draft_model(config, draft, DraftTarget(self.path, self.model_config, self.tokenizer, device,
                                                              dtype))
        extra_kv = kv_bytes_per_block(draft_model[1], config.block_size, dtype) if draft_model else 0
        self.runner = ModelRunner(checkpoint, config, device, dtype,
                                  get_attention_backend(config.attention_backend, device), extra_kv)
        self.max_model_len = resolve_max_model_len(config, self.model_config, self.runner.num_blocks)
        self.runner.model.build_rotary(self.max_model_len + 1, device)
        self.runner.capture_cuda_graphs(config, self.max_model_len)
        self.speculator = _speculator(config, draft_model, self.runner, self.max_model_len,
                                      _special_token_ids(self.model_config, self.tokenizer))
        self.block_manager = BlockManager(self.runner.num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(self.block_manager, config.max_num_seqs, config.max_num_batched_tokens)
        self.processor = InputProcessor(self.path, self.tokenizer, self.model_config, self.max_model_len, config.seed,
                                        self.runner.make_generator)
        self.detokenizer = Detokenizer(self.tokenizer) if self.tokenizer is not None else None
        self.output_processor = OutputProcessor(self.detokenizer, self.processor.eos_token_ids, self.max_model_len)
        self._inbox = Inbox()
        self._lock = threading.RLock()
        self._work, self._turnstile = threading.Condition(self._lock), Turnstile()  # fair turns at the lock
        self._loop_thread: threading.Thread | None = None
        self._closed = False
        self.core = EngineCore(self.runner, self.speculator, self.scheduler, self.output_processor, self._inbox,
                               self._lock, self.max_model_len)

    @classmethod
    def from_pretrained(cls, path: str | Path | GGUFCheckpoint, draft: str | Path | Engine | None = None,
                        **config: Any) -> Engine:
        """path: see __init__. config: EngineConfig's fields. speculative defaults to "draft" with `draft`."""
        if draft is not None and config.get("speculative") is None:
            config["speculative"] = "draft"
        return cls(path, EngineConfig.from_options(**config), draft=draft)

    # ---- requests -------------------------------------------------------------------------------------------

    def add_request(self, prompt: Prompt, params: SamplingParams | None = None, request_id: str | None = None,
                    priority: int = 0, on_output: Callable[[RequestOutput], None] | None = None,
                    stream: bool = False, tenant: Hashable | None = None) -> str:
        """Queues a request; the next step picks it up. Raises InvalidRequestError for bad input.
        priority: lower is served first (the quality monitor replays at a higher number). tenant: who asks, an
        opaque id (an API key's): seats and KV blocks are shared fairly between tenants (tiers.engine.fair_share)."""
        seq = self.processor.make_sequence(prompt, params or SamplingParams(), request_id, priority, on_output,
                                           stream, tenant)
        self._submit([seq])
        return seq.request_id

    def check_structured_output(self, params: StructuredOutputParams) -> None:
        """Compiles and caches the grammar as add_request would: InvalidRequestError for a schema it refuses."""
        self.processor.grammars.compile(params)

    def _submit(self, seqs: list[Sequence]) -> None:
        with self._turnstile.entering(), self._lock:
            self._inbox.add(seqs)
            self._work.notify_all()

    def abort(self, request_id: str) -> None:
        """Stops a request (no-op if it already finished); its blocks are freed on the next step."""
        with self._turnstile.entering(), self._lock:
            self._inbox.aborted.append(request_id)
            self._work.notify_all()

    def has_unfinished_requests(self) -> bool:
        return bool(self._inbox or self.scheduler.has_unfinished())

    # ---- the step (tiers.engine.core) ------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """One scheduler/model step. A failure while serving one sequence ends that sequence with an error (its
        blocks freed) and the others go on; only a failure of the engine's own bookkeeping raises."""
        return self.core.step()

    @property
    def num_steps(self) -> int:
        return self.core.num_steps

    # ---- front ends -----------------------------------------------------------------------------------------

    def generate(self, prompts: Prompt | Seq[Prompt], params: SamplingParams | Seq[SamplingParams] | None = None,
                 priority: int = 0) -> list[RequestOutput]:
        """Runs the prompts to completion and returns one finished output per prompt, in order."""
        results: dict[str, RequestOutput] = {}
        done = threading.Event()

        def collect(out: RequestOutput) -> None:
            if out.finished:
                results[out.request_id] = out
                if len(results) == len(seqs):
                    done.set()

        seqs = self.processor.make_batch(prompts, params, priority, collect)
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
            raise failure(errors[0].error_kind, errors[0].error or "unknown error")
        return [results[s.request_id] for s in seqs]

    async def stream(self, prompt: Prompt, params: SamplingParams | None = None, request_id: str | None = None,
                     priority: int = 0, tenant: Hashable | None = None) -> AsyncIterator[RequestOutput]:
        """Yields an output per generated token (delta_text / new_token_ids), the last one with finished=True.
        Closing the iterator early aborts the request. priority, tenant: as add_request's."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        seq = self.processor.make_sequence(prompt, params or SamplingParams(), request_id, priority,
                                           lambda out: loop.call_soon_threadsafe(queue.put_nowait, out), True, tenant)
        self._submit([seq])
        self._ensure_loop_thread()
        finished = False
        try:
            while not finished:
                out = await queue.get()
                finished = out.finished
                if out.finish_reason == "error":
                    raise failure(out.error_kind, out.error or "unknown error")
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
            self._turnstile.let_in()
            with self._lock:
                while not self._closed and not self.has_unfinished_requests():
                    self._work.wait()
                if self._closed:
                    return
            try:
                self.step()
            except Exception as exc:  # the engine's own bookkeeping broke: fail everyone rather than hang the streams
                logger.exception("engine loop failed")
                self._fail_all(f"{type(exc).__name__}: {exc}")

    def _fail_all(self, error: str) -> None:
        with self._lock:
            self.core.admit_pending([])
            for seq in [seq for seq in self._inbox.live.values() if not seq.is_finished]:
                self.core.finish(seq, "error", [], error=error, error_kind=ENGINE_FAILED)

    def close(self) -> None:
        """Stops the background loop; unfinished requests are aborted."""
        with self._lock:
            self._closed = True
            self._work.notify_all()
            self._inbox.aborted.extend(list(self._inbox.live))
            self.core.admit_pending([])
        if self._loop_thread is not None:
            self._loop_thread.join(timeout=10)

    @property
    def is_healthy(self) -> bool:  # False once closed
        return not self._closed

    def stats(self) -> EngineStats:
        return _stats(self.block_manager, self.scheduler, len(self._inbox.added), self.num_steps, self.speculator)

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        return self.processor.apply_chat_template(messages, add_generation_prompt)


def _stats(bm: BlockManager, scheduler: Scheduler, num_pending: int, num_steps: int,
           speculator: Speculator | None) -> EngineStats:
    used = bm.num_blocks - bm.num_free_blocks
    return EngineStats(num_blocks=bm.num_blocks, num_free_blocks=bm.num_free_blocks, num_used_blocks=used,
                       kv_cache_usage=used / bm.num_blocks, num_running=len(scheduler.running),
                       num_waiting=len(scheduler.waiting) + num_pending, prefix_cache_hit_rate=bm.prefix_hit_rate,
                       num_preemptions=scheduler.num_preemptions, num_steps=num_steps,
                       speculative=speculator.stats() if speculator else None)


def _draft_model(config: EngineConfig, draft: str | Path | Engine | None, target: DraftTarget
                 ) -> tuple[LlamaForCausalLM, ModelConfig] | None:
    """The draft's model and config with config.speculative == "draft", else None."""
    if config.speculative != "draft":
        if draft is not None:
            raise ValueError(f"a draft model was given, but speculative={config.speculative!r}: "
                             "use speculative='draft'")
        return None
    if draft is None:
        raise ValueError("speculative='draft' needs a draft model: draft=<checkpoint folder or Engine>")
    if isinstance(draft, Engine):
        return share_draft_model(draft.path, draft.runner, draft.model_config, draft.tokenizer, target)
    return load_draft_model(Path(draft), target)


def _special_token_ids(model_config: ModelConfig, tokenizer: Any) -> tuple[int, ...]:
    """End-of-sequence and the tokenizer's special tokens: a draft head keeps them whatever their ids."""
    special = getattr(tokenizer, "all_special_ids", None) or ()
    return tuple(model_config.eos_token_ids) + tuple(special)


def _speculator(config: EngineConfig, draft_model: tuple[LlamaForCausalLM, ModelConfig] | None,
                runner: ModelRunner, max_model_len: int, special_ids: tuple[int, ...]) -> Speculator | None:
    if config.speculative is None:
        return None
    draft_runner = (DraftRunner(*draft_model, runner, max_model_len + 1, config.draft_vocab_size, special_ids)
                    if draft_model else None)
    return Speculator(config, draft_runner)
