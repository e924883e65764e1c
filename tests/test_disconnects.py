"""A client that goes away stops its request's work, and every request, however it ends, is logged and gives its
key's slot in flight back. In process (tests/inprocess.py): the real route and ChatService over a tiny random
model's engine whose steps the test gates, so a generation cannot finish before the test lets it."""
from __future__ import annotations

import asyncio
import threading

import pytest

from tests.inprocess import Call, StepGate, chat_app, engine_idle, limited_key, until
from tests.test_chat_service import FakeTier
from tiers.engine.llm_engine import Engine
from tiers.serving.pool import ChatChunk, LocalTier

pytestmark = pytest.mark.usefixtures("one_thread")

HELLO = [{"role": "user", "content": "Hello"}]
KEY = limited_key(max_streams=1)


@pytest.fixture
def gated(checkpoint_dir):
    engine = Engine.from_pretrained(checkpoint_dir("llama"), max_model_len=256)
    gate = StepGate(engine)
    app, service, log = chat_app([LocalTier("small", engine, "tiny")], {"": KEY})
    yield engine, gate, app, log
    gate.open()
    engine.close()


async def slot_is_back(app) -> None:
    """The key (one request in flight at most) is served again, not refused with 429."""
    call = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 1})
    await call.finished()
    assert call.status == 200, call.content


def test_a_client_that_disconnects_mid_stream_frees_its_kv_and_is_logged_cancelled(gated):
    engine, gate, app, log = gated

    async def main():
        call = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 50, "stream": True,
                          "ignore_eos": True})
        gate.allow(1)  # the prompt and a first token; no step more until the test says
        await call.wait_for_events(2)  # the role chunk and that first token
        assert engine.stats().kv_cache_usage > 0
        call.disconnect()
        await call.finished()
        gate.open()
        await engine_idle(engine)
        await slot_is_back(app)

    asyncio.run(main())
    row = log.records[0]
    assert row.status == "cancelled" and row.http_status == 499 and row.completion_tokens == 1


def test_a_client_that_disconnects_before_a_non_streamed_answer_aborts_it_and_is_logged_cancelled(gated):
    engine, gate, app, log = gated

    async def main():
        call = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 100, "n": 2, "ignore_eos": True})
        gate.allow(3)
        await gate.ran(3)  # both choices generate, far from their 100 tokens
        assert engine.stats().num_running == 2 and engine.stats().kv_cache_usage > 0
        call.disconnect()
        await call.finished()  # without the disconnect watch, this waited for the whole answer
        gate.open()
        await engine_idle(engine)
        await slot_is_back(app)

    asyncio.run(main())
    row = log.records[0]
    assert row.status == "cancelled" and row.http_status == 499 and 0 < row.completion_tokens < 200


def test_a_client_that_disconnects_while_queued_is_aborted_before_its_first_token(gated):
    engine, gate, app, log = gated

    async def main():
        call = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 20, "stream": True})
        while not engine.has_unfinished_requests():  # handed to the engine, which runs no step yet
            await asyncio.sleep(0.01)
        call.disconnect()
        await call.finished()
        gate.open()
        await engine_idle(engine)
        await slot_is_back(app)

    asyncio.run(main())
    row = log.records[0]
    assert row.status == "cancelled" and row.http_status == 499 and row.completion_tokens == 0


def test_a_stream_whose_client_left_as_it_opened_is_aborted_and_logged_cancelled(gated):
    """Opened (its first token came), then Starlette sees the disconnect as it starts the response."""
    engine, gate, app, log = gated

    async def main():
        call = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 50, "stream": True,
                          "ignore_eos": True}, disconnect_at=3)  # receives: the body, the open's watch, Starlette's
        gate.allow(1)
        await call.finished()
        gate.open()
        await engine_idle(engine)
        await slot_is_back(app)

    asyncio.run(main())
    row = log.records[0]
    assert row.status == "cancelled" and row.http_status == 499 and row.completion_tokens == 1


def test_a_stream_whose_connection_breaks_is_aborted_and_logged_cancelled(gated):
    """Sending fails (the socket is gone): the response ends with the error and its events are closed, not left
    suspended until the garbage collector finds them."""
    engine, gate, app, log = gated

    async def main():
        call = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 50, "stream": True,
                          "ignore_eos": True}, fail_send_at=3)  # the response's start, the role chunk, a token
        gate.allow(1)
        with pytest.raises(OSError):
            await call.finished()
        gate.open()
        await engine_idle(engine)
        await slot_is_back(app)

    asyncio.run(main())
    row = log.records[0]
    assert row.status == "cancelled" and row.http_status == 499 and row.completion_tokens == 1


def test_a_full_queue_gets_429_and_a_dropped_stream_lets_the_queued_request_run(checkpoint_dir):
    """One sequence at a time and a queue of one: a third request is refused with Retry-After; the first
    client leaving frees the engine for the queued one."""
    engine = Engine.from_pretrained(checkpoint_dir("llama"), max_model_len=256, max_num_seqs=1)
    gate = StepGate(engine)
    app, _, log = chat_app([LocalTier("small", engine, "tiny")], max_queue=1)

    async def main():
        first = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 200, "stream": True,
                           "ignore_eos": True})
        gate.allow(1)
        await first.wait_for_events(2)
        second = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 2})
        await until(lambda: engine.stats().num_waiting == 1)
        third = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 2})
        await third.finished()
        assert third.status == 429 and third.json()["error"]["code"] == "queue_full"
        assert int(third.response_headers["retry-after"]) >= 1
        first.disconnect()
        await first.finished()
        gate.open()
        await second.finished()
        assert second.status == 200
        await engine_idle(engine)

    try:
        asyncio.run(main())
    finally:
        gate.open()
        engine.close()
    rows = {r.http_status: r for r in log.records}
    assert rows[499].status == "cancelled" and rows[499].completion_tokens == 1 and rows[200].status == "ok"


def test_a_client_that_disconnects_while_its_request_is_routed_is_logged():
    class SlowTier(FakeTier):
        def __init__(self) -> None:
            super().__init__("small")
            self.counting, self.go_on = threading.Event(), threading.Event()

        def count_prompt_tokens(self, messages, options=None) -> int:  # runs in a worker thread
            self.counting.set()
            self.go_on.wait(60)
            return super().count_prompt_tokens(messages, options)

    tier = SlowTier()
    app, service, log = chat_app([tier], {"": KEY})

    async def main():
        call = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 2})
        await asyncio.to_thread(tier.counting.wait, 60)
        call.disconnect()
        await call.finished()
        tier.go_on.set()
        await slot_is_back(app)

    asyncio.run(main())
    row = log.records[0]
    assert row.status == "rejected" and row.http_status == 499
    assert [params.max_tokens for _, params in tier.calls] == [1]  # only the request after it generated


# ---- every failure gives the slot back and leaves a row ---------------------------------------------------

class FailingTier(FakeTier):
    """A fake tier that raises once, at the chosen stage of a request."""

    def __init__(self, stage: str) -> None:
        super().__init__("small")
        self.stage = stage

    def count_prompt_tokens(self, messages, options=None) -> int:
        self._raise_at("prepare")
        return super().count_prompt_tokens(messages, options)

    async def stream_chat(self, messages, params, request_id, priority=0, options=None, tenant=None):
        self._raise_at("open")
        yield ChatChunk(delta_text="x", num_new_tokens=1)
        self._raise_at("complete", "stream")
        async for chunk in super().stream_chat(messages, params, request_id, priority, options, tenant):
            yield chunk

    def _raise_at(self, *stages: str) -> None:
        if self.stage in stages:
            self.stage = "done"
            raise ValueError("invalid literal for int() with base 10: '²'")


@pytest.mark.parametrize("stage, stream, status, row_status", [
    ("prepare", False, 500, "rejected"), ("open", False, 500, "error"), ("open", True, 500, "error"),
    ("complete", False, 500, "error"), ("stream", True, 200, "error")])
def test_an_exception_at_any_stage_releases_the_keys_slot_and_is_logged(stage, stream, status, row_status):
    app, service, log = chat_app([FailingTier(stage)], {"": KEY})

    async def main():
        call = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 2, "stream": stream})
        await call.finished()
        assert call.status == status
        if status >= 400:
            assert set(call.json()["error"]) == {"message", "type", "param", "code"}
            assert "²" not in call.json()["error"]["message"]  # the details stay in the server's log
        else:
            assert '"error"' in call.events[-2] and call.events[-1] == "data: [DONE]"
        await slot_is_back(app)

    asyncio.run(main())
    row = log.records[0]
    assert row.status == row_status and row.http_status == 500
    assert service._in_flight == 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_failure_of_the_accounting_itself_still_gives_the_slot_back(stream):
    app, service, log = chat_app([FakeTier("small")], {"": KEY})
    finished = service.accounting.finished

    def failing_finish(chat, state):
        service.accounting.finished = finished  # once
        raise RuntimeError("the accounting broke")
    service.accounting.finished = failing_finish

    async def main():
        call = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 2, "stream": stream})
        with pytest.raises(RuntimeError):  # unhandled: re-raised to the server (after a 500 when nothing was sent)
            await call.finished()
        await slot_is_back(app)

    asyncio.run(main())
    assert service._in_flight == 0
