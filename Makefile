# The README's two commands live here: `make serve` and `make test`.
# Each does its own set-up on a fresh machine: it creates .venv when missing
# and (re)installs the project with its dev extras whenever pyproject.toml
# changes. torch is pinned to 2.13.0 in pyproject.toml, which makes pip take
# the CPU wheel that lies on these machines instead of a multi-GB CUDA build.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
SERVE_ARGS ?=

.PHONY: venv test serve demo-model bench docker-check clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

serve: $(STAMP)
	$(VENV)/bin/anchorage serve $(SERVE_ARGS)

# Retrain the built-in demo model (deterministic from its seed; 1,103 s alone on 2 cores, measured 2026-12-08).
demo-model: $(STAMP)
	$(PY) -m models.demo.train --out models/demo/checkpoint --seed 1

# `make bench`: anchorage against its peers (transformers serve, llama.cpp's server,
# llama-cpp-python's server, transformers generate), side by side in one run; writes
# docs/benchmarks.md. Not part of `make test`. Peers install into their own venvs in a per-user
# cache (~/.cache/anchorage/bench, or $$ANCHORAGE_BENCH_WORK); the first run there compiles
# llama.cpp with one nice'd job (allow an hour), later runs and fresh clones reuse it.
# BENCH_ARGS=--short for a quick check; BENCH_ARGS="--threads 1" when other jobs share the cores.
BENCH_ARGS ?=

bench: $(STAMP)
	$(PY) -m bench.run $(BENCH_ARGS)

# Builds the Dockerfile and runs the image with a tiny checkpoint on a private
# dockerd (docker/check.sh; installs docker.io and debootstrap when missing,
# needs root). Several minutes the first time, about a minute once cached.
docker-check: $(STAMP)
	DOCKER_CHECK_PYTHON=$(abspath $(PY)) docker/check.sh

clean:
	rm -rf $(VENV) tests/.checkpoints bench/.work
