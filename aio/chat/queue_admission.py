"""How many sequences a tier's queue takes: each of a request's `n` sequences counts against the tier's
`max_queue`, and one key may hold at most half of it (a 429 past either). Which of the admitted sequences runs
first is the engine's to decide: it shares seats and KV blocks fairly between keys (tiers.engine.fair_share)."""
from __future__ import annotations

from aio.api.errors import APIError
from aio.chat.context import PreparedChat
from tiers.serving.pool import Tier

QUEUE_FULL_RETRY_AFTER_S = 1.0
DEFAULT_MAX_QUEUE = 256


class QueueAdmission:
    def __init__(self, max_queue: dict[str, int]) -> None:
        self.max_queue = max_queue  # tier name -> sequences
        self._held: dict[tuple[str, int], int] = {}  # (tier, key id) -> sequences opened, not finished

    def admit(self, tier: Tier, key_id: int | None, num_sequences: int) -> None:
        """Raises a 429 APIError when the tier's queue, or this key's half of it, has no room for the sequences."""
        max_queue = self.max_queue.get(tier.name, DEFAULT_MAX_QUEUE)
        if tier.load().num_waiting + num_sequences > max_queue:
            raise APIError(429, f"tier {tier.name} has too many queued requests; retry later", code="queue_full",
                           retry_after_s=QUEUE_FULL_RETRY_AFTER_S)
        held = self._held.get((tier.name, key_id), 0) if key_id is not None else 0
        if held and held + num_sequences > max(1, max_queue // 2):
            raise APIError(429, f"this API key has {held} sequences in flight on tier {tier.name}, its fair share "
                                "of the queue; retry when some finish", code="queue_share_exceeded",
                           retry_after_s=QUEUE_FULL_RETRY_AFTER_S)

    def hold(self, chat: PreparedChat) -> None:
        """Counts the request's sequences against its key on the tier it opens on (kept through a fallback)."""
        if chat.ctx.key_id is not None:
            chat.queue_slot = (chat.tier.name, chat.ctx.key_id)
            self._held[chat.queue_slot] = self._held.get(chat.queue_slot, 0) + len(chat.params)

    def release(self, chat: PreparedChat) -> None:
        if chat.queue_slot is None:
            return
        held = self._held.get(chat.queue_slot, 0) - len(chat.params)
        if held > 0:
            self._held[chat.queue_slot] = held
        else:
            self._held.pop(chat.queue_slot, None)
        chat.queue_slot = None

    def held(self, tier: str, key_id: int) -> int:
        """The key's sequences in flight on the tier."""
        return self._held.get((tier, key_id), 0)
