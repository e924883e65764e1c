"""The tier layer above the engine: the pool AIO serves from (`pool`: a local `Engine` per tier, or `remote`, an
OpenAI-compatible server over HTTP) and tool calling on local tiers (`tools`: the prompt, the parsers of each
model's call format, `tool_choice` enforced by guided decoding)."""
