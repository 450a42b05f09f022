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

# Retrain the built-in demo model (deterministic from its seed, ~15-20 min on 2 cores).
demo-model: $(STAMP)
	$(PY) -m models.demo.train --out models/demo/checkpoint

# Builds the Dockerfile and runs the image with a tiny checkpoint on a private
# dockerd (docker/check.sh; installs docker.io and debootstrap when missing,
# needs root). Several minutes the first time, about a minute once cached.
docker-check: $(STAMP)
	DOCKER_CHECK_PYTHON=$(abspath $(PY)) docker/check.sh

clean:
	rm -rf $(VENV) tests/.checkpoints bench/.work
