"""How a request that failed while it was served reads to its caller.

A failure is one request's (its grammar could not go on, or serving it raised) or the engine's (the step loop
itself broke). The engine ends a request's sequence on its own failure and goes on with the others; only an
engine failure ends every request it holds.
"""
from __future__ import annotations

from tiers.engine.sampling_params import InvalidRequestError

# RequestOutput.error_kind
REQUEST_INVALID = "invalid_request"  # the request asked for what cannot be served (e.g. a grammar with no way on)
REQUEST_FAILED = "request"  # serving this request raised; the others were not affected
ENGINE_FAILED = "engine"  # the engine's loop broke: every request it held was ended


class RequestFailedError(RuntimeError):
    """This request failed while it was served; the engine and its other requests go on. The message is for the
    operator's log (it may name internal exceptions)."""


class EngineFailedError(RuntimeError):
    """The engine's step loop failed as a whole (not one request's doing) and ended every request it held."""


class GrammarError(InvalidRequestError):
    """A request's grammar (structured output) cannot go on: the library hit a limit or refused a token its own
    mask allowed. The request's own error: its schema, not the engine."""


def describe_failure(exc: Exception) -> tuple[str, str]:
    """(message, kind) of a sequence whose serving raised `exc`."""
    if isinstance(exc, InvalidRequestError):
        return str(exc), REQUEST_INVALID
    return f"{type(exc).__name__}: {exc}", REQUEST_FAILED


def failure(kind: str | None, message: str) -> Exception:
    """The exception a stream raises for an output that finished with an error of `kind`."""
    if kind == REQUEST_INVALID:
        return InvalidRequestError(message)
    if kind == ENGINE_FAILED:
        return EngineFailedError(f"generation failed: {message}")
    return RequestFailedError(f"generation failed: {message}")
