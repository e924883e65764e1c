import os

import torch

# Triton kernels run on CPU only in the interpreter, and it must be chosen before `import triton`.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


ARCHS = ["llama", "llama-tied", "qwen2", "mistral"]
# Large enough that random models have peaked logits: greedy ties would make token-exact checks flaky.
INIT_RANGE = 0.15


@pytest.fixture(scope="session")
def checkpoint_dir(tmp_path_factory):
    from tiers.checkpoints import create_random_checkpoint

    root = tmp_path_factory.mktemp("checkpoints")
    cache: dict[str, object] = {}

    def get(arch: str = "llama", **overrides):
        key = arch + repr(sorted(overrides.items()))
        if key not in cache:
            cache[key] = create_random_checkpoint(root / f"{arch}-{len(cache)}", arch, seed=0,
                                                  initializer_range=INIT_RANGE, **overrides)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def llama_path(checkpoint_dir):
    return checkpoint_dir("llama")
