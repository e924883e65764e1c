"""A tier served by another OpenAI-compatible server (vLLM, another AIO, any `/v1/chat/completions`)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Hashable, Sequence

import httpx

from tiers.engine.errors import RequestFailedError
from tiers.engine.sampling_params import InvalidRequestError, SamplingParams
from tiers.serving.pool import ChatChunk, Message, TierLoad, TierUnavailableError
from tiers.serving.tools.options import ChatOptions, ToolCallDelta

COOLDOWN_S = 5.0  # after a connection failure the tier counts as down this long


@dataclass
class RemoteTier:
    name: str
    base_url: str  # ends in /v1
    model: str
    max_model_len: int
    api_key: str | None = None
    timeout_s: float = 600.0
    is_demo: bool = False
    _client: httpx.AsyncClient | None = field(default=None, repr=False)
    _down_until: float = 0.0
    _num_running: int = 0

    @classmethod
    def connect(cls, name: str, base_url: str, model: str | None = None, max_model_len: int | None = None,
                api_key: str | None = None, timeout_s: float = 600.0) -> "RemoteTier":
        """Asks the server's /models for the model name and context length when they are not given."""
        base_url = base_url.rstrip("/")
        if model is None or max_model_len is None:
            headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
            try:
                response = httpx.get(f"{base_url}/models", headers=headers, timeout=10.0)
                response.raise_for_status()
                models = response.json()["data"]
            except (httpx.HTTPError, KeyError, ValueError) as exc:
                raise TierUnavailableError(f"tier {name}: cannot list the models of {base_url}: {exc}") from exc
            # vLLM lists its served model names as ids; AIO lists tiers as ids and their models as `root`.
            entry = next((m for m in models if model is None or model in (m.get("id"), m.get("root"))), None)
            if entry is None:
                raise TierUnavailableError(f"tier {name}: {base_url} does not serve model {model!r}")
            model = model or entry["id"]
            max_model_len = max_model_len or entry.get("max_model_len")
            if not max_model_len:
                raise TierUnavailableError(f"tier {name}: {base_url} does not say its max_model_len: set it in the "
                                           "tier's settings")
        return cls(name=name, base_url=base_url, model=model, max_model_len=int(max_model_len), api_key=api_key,
                   timeout_s=timeout_s)

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers,
                                             timeout=httpx.Timeout(self.timeout_s, connect=5.0))
        return self._client

    def count_prompt_tokens(self, messages: Sequence[Message], options: ChatOptions | None = None) -> int:
        # Without the remote tokenizer: about 3 characters per token (an overestimate for English) plus the
        # template's per-message overhead, so escalation errs towards the larger context.
        chars = sum(len(m.get("content") or "") + len(json.dumps(m.get("tool_calls") or "")) for m in messages)
        if options is not None and options.tools:
            chars += len(json.dumps(list(options.tools)))
        return chars // 3 + 4 * len(messages) + 1

    def check_options(self, options: ChatOptions) -> None:
        """The remote server checks tools and schemas itself (a 400 there is a 400 here)."""

    def token_text(self, token_id: int) -> str:
        return str(token_id)

    def _body(self, messages: Sequence[Message], params: SamplingParams,
              options: ChatOptions | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), "stream": True,
                                "stream_options": {"include_usage": True}, "max_tokens": params.max_tokens,
                                "temperature": params.temperature, "top_p": params.top_p}
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.top_k:
            body["top_k"] = params.top_k  # vLLM's (and AIO's) extra sampling parameters
        if params.ignore_eos:
            body["ignore_eos"] = True
        if params.logit_bias:
            body["logit_bias"] = {str(token): bias for token, bias in params.logit_bias.items()}  # OpenAI's JSON form
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(params, name):
                body[name] = getattr(params, name)
        if params.repetition_penalty != 1.0:
            body["repetition_penalty"] = params.repetition_penalty  # vLLM's extras
        if params.min_tokens:
            body["min_tokens"] = params.min_tokens
        if options is not None:
            body.update(options.payload())
        return body

    async def stream_chat(self, messages: Sequence[Message], params: SamplingParams, request_id: str,
                          priority: int = 0, options: ChatOptions | None = None,
                          tenant: Hashable | None = None) -> AsyncIterator[ChatChunk]:
        """tenant is not sent: the remote server schedules its own clients (this server is one of them)."""
        if not self.is_available():
            raise TierUnavailableError(f"tier {self.name} ({self.base_url}) is unreachable", COOLDOWN_S)
        self._num_running += 1
        try:
            async with self.client.stream("POST", "/chat/completions", json=self._body(messages, params, options),
                                          headers={"x-request-id": request_id}) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise _remote_error(self.name, response)
                finish_reason: str | None = None
                num_counted = 0  # deltas seen; the usage event corrects it to the server's token count
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    event = json.loads(data)
                    if "error" in event:
                        raise RequestFailedError(f"tier {self.name}: {event['error'].get('message', event['error'])}")
                    for choice in event.get("choices") or []:
                        delta = choice.get("delta") or {}
                        text = delta.get("content") or ""
                        calls = _tool_call_deltas(delta.get("tool_calls"))
                        finish_reason = choice.get("finish_reason") or finish_reason
                        if text or calls:
                            num_counted += 1
                            yield ChatChunk(delta_text=text, num_new_tokens=1, tool_calls=calls)
                    usage = event.get("usage")
                    if usage:
                        yield ChatChunk(finish_reason=finish_reason or "stop",
                                        num_prompt_tokens=usage.get("prompt_tokens", 0),
                                        num_new_tokens=max(0, usage.get("completion_tokens", 0) - num_counted))
                        return
                yield ChatChunk(finish_reason=finish_reason or "stop")
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError) as exc:
            self._down_until = time.monotonic() + COOLDOWN_S
            raise TierUnavailableError(f"tier {self.name} ({self.base_url}) is unreachable: {exc}", COOLDOWN_S) from exc
        finally:
            self._num_running -= 1

    def load(self) -> TierLoad:
        return TierLoad(num_running=self._num_running, num_waiting=0, kv_cache_usage=None)

    def is_available(self) -> bool:
        return time.monotonic() >= self._down_until

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def _tool_call_deltas(items: Any) -> list[ToolCallDelta] | None:
    """A stream delta's `tool_calls`, as the server sent them."""
    if not isinstance(items, list) or not items:
        return None
    deltas = []
    for item in items:
        function = item.get("function") or {}
        deltas.append(ToolCallDelta(int(item.get("index", 0)), item.get("id"), function.get("name"),
                                    function.get("arguments") or ""))
    return deltas


def _remote_error(name: str, response: httpx.Response) -> Exception:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text[:500]
    if response.status_code in (429, 502, 503, 504):
        retry_after = float(response.headers.get("retry-after", COOLDOWN_S) or COOLDOWN_S)
        return TierUnavailableError(f"tier {name} is busy or down: {message}", retry_after)
    if response.status_code == 400:
        return InvalidRequestError(message)
    return RequestFailedError(f"tier {name} answered {response.status_code}: {message}")
