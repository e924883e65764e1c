"""The plain data of one chat request as it goes through the service."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, AsyncIterator, Callable, Literal

from aio.api.schemas import ChatCompletionRequest
from aio.chat.confidence import Measure, confidence as answer_confidence
from aio.db.records import utcnow
from aio.routing import RoutingDecision
from aio.routing.conversation import ConversationKeys
from aio.routing.verify import Verifier
from tiers.engine.sampling_params import SamplingParams
from tiers.serving.pool import ChatChunk, Tier
from tiers.serving.tools.options import ChatOptions


@dataclass
class RequestContext:
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    key_id: int | None = None
    session: str | None = None  # the x-aio-session header: a conversation id for sticky routing
    arrived: float = field(default_factory=time.perf_counter)
    created_at: datetime = field(default_factory=utcnow)
    on_done: Callable[[int], None] | None = None  # called once with the tokens used when the request ends


@dataclass(frozen=True)
class CascadePolicy:
    """A request that cascades (aio.chat.cascade): an answer whose score is below its tier's threshold is answered
    again on the next larger tier. `measure` "scorer": the routing fit's answer scorer, P(the answer is right), with
    a threshold per tier (`verifier`); "mean" / "min": the chosen tokens' logprobs against `threshold`."""
    threshold: float | None
    measure: Measure | Literal["scorer"]
    fit: Any = None  # aio.routing.outcome_fit.RoutingFit whose answer scorer judges, with measure "scorer"
    verifier: Verifier | None = None

    def escalates(self, tier: str, score: float | None) -> bool:
        if self.verifier is not None:
            return self.verifier.escalates(tier, score)
        return score is not None and self.threshold is not None and score < self.threshold


@dataclass
class CascadeReplaced:
    """The answers a cascade replaced, as the request's row keeps them."""
    from_tier: str  # the tier that answered first
    confidence: float  # the first answer's confidence
    cost_usd: float = 0.0  # what every replaced answer cost (part of the request's cost)


@dataclass
class PreparedChat:
    """A validated, routed request, ready to generate."""
    ctx: RequestContext
    body: ChatCompletionRequest
    messages: list[dict[str, Any]]
    tier: Tier
    decision: RoutingDecision
    quality: float | None
    num_prompt_tokens: int
    params: list[SamplingParams]  # one per choice
    options: ChatOptions | None = None  # tools and output format; None: plain text chat
    created: int = field(default_factory=lambda: int(time.time()))
    queue_slot: tuple[str, int] | None = None  # (tier, key id) whose sequences in flight this request counts in
    ended: bool = False  # accounted (its row written, its key's slot released): ChatService._finish ran
    cascade: CascadePolicy | None = None  # None: served as routed, never judged
    cascaded: CascadeReplaced | None = None  # set once the cascade replaced an answer (`tier` is then the last one)
    conversation: ConversationKeys | None = None  # where the conversation's tier is remembered (a cascade raises it)

    @property
    def response_id(self) -> str:
        return f"chatcmpl-{self.ctx.request_id}"

    @property
    def max_tokens(self) -> int | None:
        """The completion tokens the client asked for (None: up to the context)."""
        return self.body.max_completion_tokens or self.body.max_tokens


@dataclass
class ChoiceState:
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI's message.tool_calls, as they come
    num_tokens: int = 0
    finish_reason: str | None = None
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # OpenAI's entries, when the client asked
    token_logprobs: list[float] = field(default_factory=list)  # the chosen tokens' logprobs, when the tier gave them
    token_margins: list[float | None] = field(default_factory=list)  # chosen logprob minus the best other token's
    num_cached_tokens: int = 0


@dataclass
class GenerationState:
    """What a request produced so far; turned into the log record however it ends."""
    choices: list[ChoiceState]
    first_token_at: float | None = None
    last_token_at: float | None = None
    first_choice_tokens_after_first: int = 0  # the first choice's tokens after its first chunk (inter-token latency)
    first_choice_started_at: float | None = None
    queue_ms: float | None = None  # reported by the tier on a chunk (`queue_time_s`), when it knows it
    status: str = "ok"
    error: str | None = None
    http_status: int = 200
    num_prompt_tokens: int | None = None  # as the tier counted them (a remote tier's own tokenizer)

    @classmethod
    def for_chat(cls, chat: PreparedChat) -> GenerationState:
        return cls([ChoiceState() for _ in chat.params])

    @property
    def completion_tokens(self) -> int:
        return sum(c.num_tokens for c in self.choices)

    def prompt_tokens(self, chat: PreparedChat) -> int:
        return self.num_prompt_tokens or chat.num_prompt_tokens

    def confidence(self, chat: PreparedChat) -> float | None:
        """The first choice's score by the request's cascade measure (the scorer's P(right), or a logprob
        confidence); None when the request is not judged or the tier gave no logprobs."""
        policy = chat.cascade
        if policy is None:
            return None
        choice = self.choices[0]
        if policy.measure != "scorer":
            return answer_confidence(choice.token_logprobs, policy.measure)
        if not choice.token_logprobs:
            return None
        from classifier.answer_scorer import AnswerEvidence

        evidence = AnswerEvidence(choice.text, choice.token_logprobs, choice.token_margins, choice.finish_reason)
        fit, tier = policy.fit, chat.tier.name
        scores = chat.decision.scores
        p_right = float(fit.p_right(scores)[0][fit.tiers.index(tier)]) if scores and tier in fit.tiers else 0.5
        return fit.scorer.score(tier, evidence, p_right)

    def mean_inter_token_ms(self) -> float | None:
        """The first choice's mean time between output tokens (from its first to its last token)."""
        if self.first_choice_started_at is None or self.last_token_at is None \
                or self.first_choice_tokens_after_first <= 0:
            return None
        return (self.last_token_at - self.first_choice_started_at) * 1000 / self.first_choice_tokens_after_first


@dataclass
class Opened:
    """A generation that has produced its first chunk (or finished without one: `chunks` and `first` are None)."""
    chat: PreparedChat
    state: GenerationState
    chunks: AsyncIterator[tuple[int, ChatChunk]] | None
    first: tuple[int, ChatChunk] | None
