"""The `aio` command."""
from __future__ import annotations

import os
import time
from pathlib import Path

import typer

app = typer.Typer(help="AIO: the Adaptive Inference Orchestrator.", no_args_is_help=True)


def aio_home() -> Path:
    return Path(os.environ.get("AIO_HOME", Path.home() / ".aio"))


@app.callback()
def main() -> None:
    """AIO command line."""


@app.command()
def demo(prompt: str = typer.Option("Explain why the sky is blue.", help="the user message"),
         max_tokens: int = typer.Option(32, min=1), temperature: float = typer.Option(0.0, min=0.0)) -> None:
    """Build the small demo checkpoint (random weights, offline) and run one chat generation on the engine."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tiers import Engine, SamplingParams
    from tiers.checkpoints import create_random_checkpoint

    path = aio_home() / "demo" / "small"
    if not (path / "config.json").is_file():
        typer.echo(f"building the demo checkpoint (random weights) in {path} ...")
        create_random_checkpoint(path, "llama", hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=4,
                                 intermediate_size=704, vocab_size=512, max_position_embeddings=2048)
    engine = Engine.from_pretrained(path)
    prompt_ids = engine.apply_chat_template([{"role": "user", "content": prompt}])
    start = time.perf_counter()
    out = engine.generate([prompt_ids], SamplingParams(max_tokens=max_tokens, temperature=temperature))[0]
    seconds = time.perf_counter() - start
    typer.echo("NOTE: demo tier with RANDOM weights: the text is gibberish; it shows the engine working.")
    typer.echo(f"prompt ({len(prompt_ids)} tokens): {prompt}")
    typer.echo(f"answer ({len(out.token_ids)} tokens, finish_reason={out.finish_reason}): {out.text!r}")
    typer.echo(f"{len(out.token_ids) / seconds:.1f} tokens/s; engine stats: {engine.stats()}")


if __name__ == "__main__":
    app()
