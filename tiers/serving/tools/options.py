"""The options that shape a chat answer besides its messages and sampling: function tools and the output format,
in OpenAI's shapes (a remote tier gets them unchanged)."""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

ToolChoice = str | dict[str, Any]  # "auto" | "none" | "required" | {"type": "function", "function": {"name": ...}}


@dataclass(frozen=True)
class ChatOptions:
    tools: tuple[dict[str, Any], ...] = ()  # [{"type": "function", "function": {"name", "description", "parameters"}}]
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = None  # {"type": "json_object"} | {"type": "json_schema", ...}

    @property
    def functions(self) -> list[dict[str, Any]]:
        """The tools' `function` objects."""
        return [tool["function"] for tool in self.tools]

    @property
    def calls_tools(self) -> bool:
        """Whether the answer may hold tool calls (tools given and tool_choice is not "none")."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def forced_function(self) -> str | None:
        """The function tool_choice names, if it names one."""
        if isinstance(self.tool_choice, dict):
            return self.tool_choice["function"]["name"]
        return None

    @property
    def is_plain(self) -> bool:
        """No tools and free text: nothing here changes how a tier answers."""
        return not self.tools and (self.response_format or {}).get("type", "text") == "text"

    def payload(self) -> dict[str, Any]:
        """The request fields a remote OpenAI-compatible server gets, unchanged."""
        body: dict[str, Any] = {}
        if self.tools:
            body["tools"] = list(self.tools)
            body["tool_choice"] = self.tool_choice
            body["parallel_tool_calls"] = self.parallel_tool_calls
        if self.response_format is not None:
            body["response_format"] = self.response_format
        return body


@dataclass
class ToolCallDelta:
    """A piece of one tool call of an answer, as OpenAI streams it: the first piece of a call has its id and name,
    the others only continue its arguments (a JSON text)."""
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index}
        function: dict[str, Any] = {"arguments": self.arguments}
        if self.id is not None:
            out["id"], out["type"] = self.id, "function"
        if self.name is not None:
            function["name"] = self.name
        out["function"] = function
        return out


@dataclass
class ToolCall:
    """A whole tool call: the function's name and its arguments as a JSON text."""
    name: str
    arguments: str
    id: str = field(default_factory=lambda: new_tool_call_id())

    def deltas(self, index: int) -> list[ToolCallDelta]:
        return [ToolCallDelta(index, self.id, self.name, self.arguments)]

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def new_tool_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def arguments_text(arguments: Any) -> str:
    """A call's arguments as the JSON text OpenAI sends (models write them as an object, some as a string)."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
