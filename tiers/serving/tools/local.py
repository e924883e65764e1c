"""Tools and output formats on a local tier: the chat template's messages, the guided-decoding constraint, and
the parser that turns the engine's text into content and tool calls."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from tiers.engine.sampling_params import InvalidRequestError, SamplingParams, StructuredOutputParams
from tiers.serving.tools.options import ChatOptions, ToolCallDelta
from tiers.serving.tools.parsers import ToolCallParser
from tiers.serving.tools.prompt import TemplateTools, render_messages
from tiers.serving.tools.tool_choice import guided_schema, make_parser, wants_json_object

if TYPE_CHECKING:
    from tiers.engine.llm_engine import Engine


class Chunk(Protocol):
    delta_text: str
    finish_reason: str | None
    tool_calls: list[ToolCallDelta] | None


@dataclass(frozen=True)
class LocalToolSupport:
    template: TemplateTools

    @classmethod
    def for_engine(cls, engine: Engine) -> LocalToolSupport:
        return cls(TemplateTools.of(getattr(engine.tokenizer, "chat_template", None)))

    def render(self, messages: Sequence[dict[str, Any]],
               options: ChatOptions | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        return render_messages(messages, options, self.template)

    @staticmethod
    def structured_output(options: ChatOptions | None) -> StructuredOutputParams | None:
        if options is None:
            return None
        try:
            schema = guided_schema(options)
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc
        if schema is not None:
            return StructuredOutputParams(json_schema=schema)
        if wants_json_object(options):
            return StructuredOutputParams(json_object=True)
        return None

    def guided(self, params: SamplingParams, options: ChatOptions | None) -> SamplingParams:
        structured = self.structured_output(options)
        return params if structured is None else replace(params, structured_output=structured)

    def parser(self, options: ChatOptions | None) -> ChunkParser | None:
        parser = make_parser(options, self.template.parser)
        return None if parser is None else ChunkParser(parser)


class ChunkParser:
    """Applies a ToolCallParser to a tier's chunks: their text becomes content and tool-call pieces; an answer
    that made calls finishes with "tool_calls"."""

    def __init__(self, parser: ToolCallParser) -> None:
        self.parser = parser

    def apply(self, chunk: Chunk) -> Chunk:
        parsed = self.parser.feed(chunk.delta_text)
        if chunk.finish_reason is not None:
            rest = self.parser.finish()
            parsed.content += rest.content
            parsed.tool_calls += rest.tool_calls
            if self.parser.num_calls and chunk.finish_reason == "stop":
                chunk.finish_reason = "tool_calls"
        chunk.delta_text = parsed.content
        chunk.tool_calls = parsed.tool_calls or None
        return chunk
