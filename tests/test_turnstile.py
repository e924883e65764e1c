"""The engine loop lets a caller waiting for the engine lock in before its next step (tiers.engine.turnstile):
without it, the loop thread retakes the lock it just released and an added request waits several steps."""
import threading
import time

from tiers.engine.turnstile import Turnstile


def test_a_waiting_caller_goes_before_the_next_step():
    turnstile, lock, order = Turnstile(timeout_s=30.0), threading.Lock(), []
    stepping = threading.Event()

    def submit() -> None:
        stepping.wait()
        with turnstile.entering(), lock:
            order.append("submit")

    submitter = threading.Thread(target=submit)
    submitter.start()
    with lock:  # step 1
        stepping.set()
        while turnstile.num_entering == 0:  # the submitter is now waiting for the lock
            time.sleep(0.001)
    turnstile.let_in()
    with lock:  # step 2
        order.append("step 2")
    submitter.join()
    assert order == ["submit", "step 2"]


def test_let_in_does_not_wait_when_nobody_is_entering():
    turnstile = Turnstile(timeout_s=30.0)
    start = time.monotonic()
    turnstile.let_in()
    assert time.monotonic() - start < 10.0  # returns at once; the bound only catches a wait for the timeout
    assert turnstile.num_entering == 0
