"""Whether a reply's Python code passes a code task's test cases: the last fenced code block (or the whole reply
when it defines a function) runs in the sandbox, then the named function is called on each case. A reply without
code, code that fails to run, or any case that fails is wrong."""
from __future__ import annotations

import ast
import json
import re

from .sandbox import Limits, Outcome, evaluate

_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
CODE_LIMITS = Limits(cpu_seconds=2, wall_seconds=10.0)


def code_of(reply: str) -> str | None:
    blocks = _FENCE.findall(reply or "")
    if blocks:
        return blocks[-1]
    return reply if reply and "def " in reply else None


def passes(reply: str, truth: str) -> bool:
    code = code_of(reply)
    if code is None:
        return False
    spec = json.loads(truth)
    check = f"[{spec['function']}(*args) == want for args, want in {spec['tests']!r}]"
    result = evaluate(code, check, CODE_LIMITS)
    if result.outcome is not Outcome.OK:
        return False
    try:
        outcomes = ast.literal_eval(result.value)
    except (ValueError, SyntaxError):
        return False
    return isinstance(outcomes, list) and len(outcomes) == len(spec["tests"]) and all(o is True for o in outcomes)
