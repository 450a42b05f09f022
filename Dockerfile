# anchorage: the OpenAI-compatible inference server as a container image.
#
#   docker build -t anchorage .
#   docker run -p 8000:8000 -v /path/to/checkpoint:/model:ro anchorage
#
# Mount points: /model (a Hugging Face style checkpoint folder, read-only; with
# nothing mounted the server serves its built-in demo model) and /slots (the
# --slot-save-path for .fslot files; a volume). The server runs as uid 10001.
#
# Package index: only pip's own environment variables, declared below as build
# args, so a private mirror or an offline wheelhouse needs no edit here, e.g.
#   --build-arg PIP_INDEX_URL=https://mirror.example/simple
#   --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=http://127.0.0.1:8080/
# torch is pinned (==2.13.0) in pyproject.toml; which build of it pip takes
# (CPU or CUDA) is decided by the index it sees: see README, "Docker".
#
# Deliberately absent: a `# syntax=` line (BuildKit would pull a frontend
# image from a registry) and RUN heredocs (the frontend built into Debian's
# docker 20.10, which CI builds with, predates them).

# Pinned to the full patch tag, not a digest: a digest can only be read from a
# registry, and this file is written and checked on machines that reach none.
# Bump the tag deliberately; `docker build --pull` refreshes its Debian layer.
FROM python:3.11.17-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HF_HUB_OFFLINE=1

RUN python -m venv /opt/venv

WORKDIR /opt/anchorage/src

# Declared here, just before pip needs them: a build arg's value is part of
# the cache key of every RUN after it, so the steps above stay cached when
# only the index changes.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX

# Dependencies first, from pyproject.toml alone (no packages yet, and an empty
# stand-in for the readme it names): this layer, the big one (torch), is
# rebuilt only when pyproject.toml changes, not on every README edit.
COPY pyproject.toml ./
RUN touch README.md && pip install --no-cache-dir .

# Then the project itself, without touching the dependencies installed above.
COPY README.md ./
COPY server/ server/
COPY models/ models/
COPY scheduler/ scheduler/
COPY slots/ slots/
COPY configs/ configs/
RUN pip install --no-cache-dir --no-deps --force-reinstall . \
    && rm -rf build ./*.egg-info

# The shipped configuration also sits beside the working directory, so
# `--config configs/<file>.toml` means in the container what it means in a
# checkout (the package copy above is what the code itself reads).
WORKDIR /app
COPY configs/ configs/
COPY docker/entrypoint.sh /usr/local/bin/anchorage-entrypoint

# A fixed numeric uid, so orchestrators can verify runAsNonRoot, and /slots
# owned by it before VOLUME, so a fresh volume starts out writable.
RUN useradd --system --uid 10001 --user-group --create-home \
        --home-dir /home/anchorage --shell /usr/sbin/nologin anchorage \
    && mkdir -p /model /slots \
    && chown anchorage:anchorage /slots
VOLUME /slots
USER 10001:10001

EXPOSE 8000
# urllib, because slim images carry no curl. The port follows ANCHORAGE_PORT
# like the entry point does.
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('ANCHORAGE_PORT', '8000'), timeout=4)"]

ENTRYPOINT ["anchorage-entrypoint"]
CMD []
