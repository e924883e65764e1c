"""Turns a model's streamed text into content and tool calls.

Each parser takes the answer's text piece by piece (`feed`) and returns what can already be told apart: content
for the client and tool-call pieces; `finish` flushes what was held back. Formats:
- hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (Qwen2.5, Hermes, and AIO's fallback
  prompt for templates without tools), content around them;
- llama3_json: the whole answer is `{"name": ..., "parameters": {...}}` (Llama 3.1+), calls joined by `;`;
- named: tool_choice named a function and guided decoding makes the answer its arguments;
- required: guided decoding makes the answer a JSON array of {"name", "arguments"} objects, read call by call.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from tiers.serving.tools.options import ToolCall, ToolCallDelta, arguments_text, new_tool_call_id


@dataclass
class ParsedDelta:
    content: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)


class ToolCallParser(ABC):
    def __init__(self) -> None:
        self.num_calls = 0

    @abstractmethod
    def feed(self, text: str) -> ParsedDelta: ...

    @abstractmethod
    def finish(self) -> ParsedDelta: ...

    def _emit(self, calls: list[ToolCall]) -> list[ToolCallDelta]:
        deltas = []
        for call in calls:
            deltas += call.deltas(self.num_calls)
            self.num_calls += 1
        return deltas


def call_from_json(obj: Any) -> ToolCall | None:
    """{"name": str, "arguments" | "parameters": object or JSON text} → a ToolCall; anything else → None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(obj["name"], arguments_text(arguments))


class HermesParser(ToolCallParser):
    START, END = "<tool_call>", "</tool_call>"

    def __init__(self) -> None:
        super().__init__()
        self._buffer = ""
        self._in_block = False

    def feed(self, text: str) -> ParsedDelta:
        self._buffer += text
        out = ParsedDelta()
        while True:
            if self._in_block:
                end = self._buffer.find(self.END)
                if end < 0:
                    return out
                self._close_block(self._buffer[:end], out)
                self._buffer = self._buffer[end + len(self.END):]
                continue
            start = self._buffer.find(self.START)
            if start < 0:
                keep = _partial_suffix(self._buffer, self.START)
                self._content(self._buffer[:len(self._buffer) - keep], out)
                self._buffer = self._buffer[len(self._buffer) - keep:]
                return out
            self._content(self._buffer[:start], out)
            self._buffer = self._buffer[start + len(self.START):]
            self._in_block = True

    def finish(self) -> ParsedDelta:
        out = ParsedDelta()
        if self._in_block:  # the answer ended inside a block (no closing tag): a call if it parses
            self._close_block(self._buffer, out)
        else:
            self._content(self._buffer, out)
        self._buffer = ""
        return out

    def _close_block(self, block: str, out: ParsedDelta) -> None:
        self._in_block = False
        try:
            call = call_from_json(json.loads(block))
        except ValueError:
            call = None
        if call is None:
            self._content(self.START + block + self.END, out)
        else:
            out.tool_calls += self._emit([call])

    def _content(self, text: str, out: ParsedDelta) -> None:
        if self.num_calls and not text.strip():
            return  # the whitespace between calls is not content
        out.content += text


class Llama3JsonParser(ToolCallParser):
    """An answer that starts with `{` (after an optional `<|python_tag|>`) is held and parsed as calls at the end;
    if it does not parse, it is content after all."""
    TAG = "<|python_tag|>"

    def __init__(self) -> None:
        super().__init__()
        self._buffer = ""
        self._mode: str | None = None  # None: undecided, "content", "calls"

    def feed(self, text: str) -> ParsedDelta:
        if self._mode == "content":
            return ParsedDelta(content=text)
        self._buffer += text
        head = self._buffer.lstrip()
        if not head or (self.TAG.startswith(head) and len(head) < len(self.TAG)):
            return ParsedDelta()
        if head.startswith("{") or head.startswith(self.TAG):
            self._mode = "calls"
            return ParsedDelta()
        self._mode = "content"
        text, self._buffer = self._buffer, ""
        return ParsedDelta(content=text)

    def finish(self) -> ParsedDelta:
        text, self._buffer = self._buffer, ""
        if self._mode != "calls":
            return ParsedDelta(content=text)
        calls = _json_calls(text.strip().removeprefix(self.TAG))
        if calls is None:
            return ParsedDelta(content=text)
        return ParsedDelta(tool_calls=self._emit(calls))


class NamedCallParser(ToolCallParser):
    """The answer is the named function's arguments (guided decoding): streamed as argument fragments."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def feed(self, text: str) -> ParsedDelta:
        if not text:
            return ParsedDelta()
        if self.num_calls == 0:
            self.num_calls = 1
            return ParsedDelta(tool_calls=[ToolCallDelta(0, new_tool_call_id(), self.name, text)])
        return ParsedDelta(tool_calls=[ToolCallDelta(0, arguments=text)])

    def finish(self) -> ParsedDelta:
        if self.num_calls == 0:  # nothing generated (e.g. max_tokens hit at once): still one call, no arguments
            self.num_calls = 1
            return ParsedDelta(tool_calls=[ToolCallDelta(0, new_tool_call_id(), self.name, "")])
        return ParsedDelta()


class RequiredCallsParser(ToolCallParser):
    """The answer is a JSON array of {"name", "arguments"} objects (guided decoding). Each call is emitted as soon
    as its object closes, so an answer cut by max_tokens still returns the calls it completed; the unfinished
    rest is dropped, never returned as content. An exact repeat of an earlier call of the answer (same name, same
    arguments) is dropped: a small model may repeat its call up to the array's bound, and a client would run it
    twice. An answer that does not open an array (no grammar held it) is content."""

    def __init__(self) -> None:
        super().__init__()
        self._state = "start"  # "start" (before `[`), "items" (between objects), "object", "end", "content"
        self._object = ""  # the text of the object being read, or what came before `[`
        self._depth = 0  # nesting inside the current object
        self._in_string = self._escaped = False
        self._seen: set[tuple[str, str]] = set()

    def feed(self, text: str) -> ParsedDelta:
        out = ParsedDelta()
        for i, char in enumerate(text):
            if self._state == "content":
                out.content += text[i:]
                break
            self._scan(char, out)
        return out

    def finish(self) -> ParsedDelta:
        out = ParsedDelta(content=self._object if self._state == "start" else "")
        self._object = ""
        return out

    def _scan(self, char: str, out: ParsedDelta) -> None:
        if self._state == "start":
            self._object += char
            if char == "[":
                self._state, self._object = "items", ""
            elif not char.isspace():
                self._state, self._object, out.content = "content", "", out.content + self._object
        elif self._state == "items":  # `,` and whitespace between the objects are skipped
            if char == "{":
                self._state, self._object, self._depth = "object", char, 1
            elif char == "]":
                self._state = "end"
        elif self._state == "object":
            self._object += char
            if self._escaped:
                self._escaped = False
            elif self._in_string:
                self._escaped, self._in_string = char == "\\", char != '"'
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self._close(self._object, out)
                    self._state, self._object = "items", ""

    def _close(self, text: str, out: ParsedDelta) -> None:
        try:
            call = call_from_json(json.loads(text))
        except ValueError:
            return
        if call is None:
            return
        key = (call.name, json.dumps(json.loads(call.arguments), sort_keys=True))
        if key not in self._seen:
            self._seen.add(key)
            out.tool_calls += self._emit([call])


def _json_calls(text: str) -> list[ToolCall] | None:
    """Calls from a JSON object, a JSON array of objects, or objects joined by `;`; None if any part fails."""
    text = text.strip()
    try:
        parsed = json.loads(text)
        items = parsed if isinstance(parsed, list) else [parsed]
    except ValueError:
        try:
            items = [json.loads(part) for part in text.split(";") if part.strip()]
        except ValueError:
            return None
    calls = [call_from_json(item) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return calls  # type: ignore[return-value]


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag` (it may be the start of a tag still coming)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
