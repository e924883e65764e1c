"""The tier pool: the model tiers a deployment serves, each a local engine or a remote OpenAI-compatible server.

Tiers speak chat messages and `SamplingParams`; nothing here knows about the HTTP server, routing or SQL.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Hashable, Protocol, Sequence

from tiers.engine.config import EngineConfig
from tiers.engine.errors import EngineFailedError, RequestFailedError
from tiers.engine.outputs import SpecDecodeStats
from tiers.engine.sampling_params import InvalidRequestError, SamplingParams
from tiers.engine.sequence import TokenLogprob
from tiers.engine.llm_engine import Engine
from tiers.serving.tools.local import LocalToolSupport
from tiers.serving.tools.options import ChatOptions, ToolCallDelta

logger = logging.getLogger(__name__)

Message = dict[str, Any]  # {"role", "content"}; assistant turns may carry "tool_calls", tool turns "tool_call_id"


class TierUnavailableError(RuntimeError):
    """The tier cannot take requests now (its server is unreachable or its engine failed). The only failure that
    marks a tier down: a request's own failure (RequestFailedError, InvalidRequestError) leaves it up."""

    def __init__(self, message: str, retry_after_s: float = 5.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass
class ChatChunk:
    """A piece of one choice's answer; the last one has finish_reason set."""
    delta_text: str = ""
    num_new_tokens: int = 0
    logprobs: list[TokenLogprob] | None = None  # for the new tokens, when asked
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "tool_calls"
    tool_calls: list[ToolCallDelta] | None = None  # pieces of the answer's tool calls
    num_prompt_tokens: int = 0  # known on the last chunk
    num_cached_tokens: int = 0
    queue_time_s: float | None = None  # waited in the engine's queue before its first step (local tiers)


@dataclass
class TierLoad:
    num_running: int
    num_waiting: int
    kv_cache_usage: float | None  # None when unknown (remote tiers)
    speculative: SpecDecodeStats | None = None  # acceptance counters, for a tier that decodes speculatively


class Tier(Protocol):
    name: str  # "small" | "medium" | "large"
    model: str  # the model name clients see
    max_model_len: int
    is_demo: bool

    def count_prompt_tokens(self, messages: Sequence[Message], options: ChatOptions | None = None) -> int: ...

    def check_options(self, options: ChatOptions) -> None:
        """Raises InvalidRequestError when the tier cannot honour `options` (e.g. a schema it cannot enforce)."""

    def stream_chat(self, messages: Sequence[Message], params: SamplingParams, request_id: str,
                    priority: int = 0, options: ChatOptions | None = None,
                    tenant: Hashable | None = None) -> AsyncIterator[ChatChunk]:
        """tenant: who asks (an API key's id), for a local engine's fair sharing between tenants."""

    def token_text(self, token_id: int) -> str: ...

    def load(self) -> TierLoad: ...

    def is_available(self) -> bool: ...

    async def aclose(self) -> None: ...


@dataclass
class LocalTier:
    """A tier served in this process by the shared engine."""
    name: str
    engine: Engine
    model: str
    is_demo: bool = False

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    @property
    def tools(self) -> LocalToolSupport:
        return LocalToolSupport.for_engine(self.engine)

    def encode(self, messages: Sequence[Message], options: ChatOptions | None = None) -> list[int]:
        rendered, tools = self.tools.render(messages, options)
        return self.engine.processor.apply_chat_template(rendered, tools=tools)

    def count_prompt_tokens(self, messages: Sequence[Message], options: ChatOptions | None = None) -> int:
        return len(self.encode(messages, options))

    def check_options(self, options: ChatOptions) -> None:
        structured = self.tools.structured_output(options)
        if structured is not None:
            self.engine.check_structured_output(structured)

    async def stream_chat(self, messages: Sequence[Message], params: SamplingParams, request_id: str,
                          priority: int = 0, options: ChatOptions | None = None,
                          tenant: Hashable | None = None) -> AsyncIterator[ChatChunk]:
        prompt_ids = self.encode(messages, options)
        if not self.engine.is_healthy:
            raise TierUnavailableError(f"tier {self.name} is shut down")
        params = self.tools.guided(params, options)
        parser = self.tools.parser(options)
        try:
            async for out in self.engine.stream(prompt_ids, params, request_id=request_id, priority=priority,
                                                tenant=tenant):
                chunk = ChatChunk(delta_text=out.delta_text, num_new_tokens=len(out.new_token_ids),
                                  logprobs=out.logprobs[-len(out.new_token_ids):]
                                  if out.logprobs and out.new_token_ids else None,
                                  finish_reason=out.finish_reason if out.finished else None,
                                  num_prompt_tokens=out.num_prompt_tokens, num_cached_tokens=out.num_cached_tokens,
                                  queue_time_s=out.queue_time_s)
                yield parser.apply(chunk) if parser is not None else chunk
        except EngineFailedError as exc:
            raise TierUnavailableError(f"tier {self.name}'s engine failed and ended its requests: {exc}") from exc

    def token_text(self, token_id: int) -> str:
        tokenizer = self.engine.tokenizer
        return tokenizer.decode([token_id]) if tokenizer is not None else str(token_id)

    def load(self) -> TierLoad:
        stats = self.engine.stats()
        return TierLoad(stats.num_running, stats.num_waiting, stats.kv_cache_usage, stats.speculative)

    def is_available(self) -> bool:
        return self.engine.is_healthy

    async def aclose(self) -> None:
        await asyncio.to_thread(self.engine.close)


@dataclass
class TierPool:
    """The configured tiers, cheapest first."""
    tiers: list[Tier] = field(default_factory=list)

    def __post_init__(self) -> None:
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be unique, got {names}")

    def __iter__(self):
        return iter(self.tiers)

    def __len__(self) -> int:
        return len(self.tiers)

    def index(self, name: str) -> int:
        for i, tier in enumerate(self.tiers):
            if tier.name == name:
                return i
        raise KeyError(name)

    def find(self, model: str) -> Tier | None:
        """A tier by its name ("small") or its model name."""
        for tier in self.tiers:
            if model in (tier.name, tier.model):
                return tier
        return None

    async def aclose(self) -> None:
        for tier in self.tiers:
            try:
                await tier.aclose()
            except Exception:
                logger.exception("closing tier %s failed", tier.name)


def load_local_tier(name: str, path: str | Path, config: EngineConfig, model: str | None = None,
                    is_demo: bool = False, draft: Engine | None = None) -> LocalTier:
    """draft: the engine whose model drafts for this one, with config.speculative == "draft"."""
    engine = Engine(path, config, draft=draft)
    return LocalTier(name=name, engine=engine, model=model or _model_name(Path(path)), is_demo=is_demo)


__all__ = ["ChatChunk", "InvalidRequestError", "LocalTier", "RequestFailedError", "Tier", "TierLoad", "TierPool",
           "TierUnavailableError", "load_local_tier"]


def _model_name(path: Path) -> str:
    """The folder's name, or a GGUF file's name without .gguf."""
    return path.stem if path.suffix.lower() == ".gguf" else path.name
