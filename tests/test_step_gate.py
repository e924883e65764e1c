"""CPU engines of one process step one at a time, in the order they asked (tiers/engine/step_gate.py)."""
from __future__ import annotations

import threading
import time

import pytest

from tiers import Engine, SamplingParams
from tiers.engine.step_gate import CPU_STEP_GATE, TicketLock, step_gate

pytestmark = pytest.mark.usefixtures("one_thread")


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_the_ticket_lock_serves_in_arrival_order():
    lock, order = TicketLock(), []

    def take(name: str) -> None:
        with lock:
            order.append(name)

    lock.__enter__()
    threads = []
    for i, name in enumerate("abcd"):
        threads.append(threading.Thread(target=take, args=(name,)))
        threads[-1].start()
        _wait_for(lambda: lock.num_waiting == i + 2)  # the holder and every thread started so far
    lock.__exit__(None, None, None)
    for thread in threads:
        thread.join(10)
    assert order == list("abcd")
    assert lock.num_waiting == 0


def test_a_releasing_thread_cannot_take_the_lock_back_while_another_waits():
    lock, turns, stop = TicketLock(), [], threading.Event()

    def busy(name: str) -> None:
        while not stop.is_set():
            with lock:
                turns.append(name)
                time.sleep(0.0005)

    threads = [threading.Thread(target=busy, args=(n,)) for n in "ab"]
    for thread in threads:
        thread.start()
    _wait_for(lambda: len(turns) >= 200)
    stop.set()
    for thread in threads:
        thread.join(10)
    steady = turns[10:200]
    runs = sum(1 for x, y in zip(steady, steady[1:]) if x == y)
    assert runs <= len(steady) // 10, f"{runs} repeated turns of {len(steady)}: the lock was not taken in turn"


def test_only_cpu_engines_take_the_gate():
    assert step_gate("cpu") is CPU_STEP_GATE
    assert step_gate("cuda") is not CPU_STEP_GATE


def test_two_cpu_engines_never_run_a_model_step_at_once(llama_path):
    engines = [Engine.from_pretrained(llama_path, device="cpu", dtype="float32", max_model_len=128) for _ in range(2)]
    running, overlaps, steps = [0], [0], [0]
    guard = threading.Lock()
    for engine in engines:
        execute = engine.runner.execute

        def timed(scheduled, execute=execute):
            with guard:
                running[0] += 1
                overlaps[0] += running[0] > 1
                steps[0] += 1
            time.sleep(0.002)  # widen the window in which a second engine's step would overlap
            try:
                return execute(scheduled)
            finally:
                with guard:
                    running[0] -= 1

        engine.runner.execute = timed
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    threads = [threading.Thread(target=e.generate, args=([[1, 2, 3, 4]], params)) for e in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for engine in engines:
        engine.close()
    assert steps[0] >= 24 and overlaps[0] == 0
