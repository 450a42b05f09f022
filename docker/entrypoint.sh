#!/bin/sh
# Container entry point: start `anchorage serve` with the image's defaults.
#
# What it is for: the one decision the Dockerfile cannot make statically,
# which model to serve. A checkpoint mounted at /model (a folder holding
# config.json) is served; with nothing mounted there the server falls back to
# its built-in demo model, so `docker run IMAGE` alone still answers; a
# non-empty /model without config.json is a mistake and stops the container.
# ANCHORAGE_MODEL, when set, wins over all of these.
#
# What it is not: a second configuration layer. Host, port and slot folder
# are the image's defaults (0.0.0.0, 8000, the /slots volume) and can be
# changed with the ANCHORAGE_HOST / ANCHORAGE_PORT / ANCHORAGE_SLOT_SAVE_PATH
# environment variables, which the HEALTHCHECK reads too; every other
# setting is the server's own (its ANCHORAGE_* environment variables, or
# flags given after the image name, which are appended here).
#
# `exec` makes the server PID 1, so `docker stop`'s SIGTERM reaches uvicorn
# directly and it shuts down gracefully.
set -eu

model_dir=/model

if [ -n "${ANCHORAGE_MODEL:-}" ]; then
    set -- --model "$ANCHORAGE_MODEL" "$@"
elif [ -f "$model_dir/config.json" ]; then
    set -- --model "$model_dir" "$@"
elif [ -d "$model_dir" ] && [ -n "$(ls -A "$model_dir" 2>/dev/null)" ]; then
    # Something was mounted but it is not a checkpoint (a parent folder, a
    # typo): serving the demo model in its place would hide the mistake.
    echo "entrypoint: $model_dir is mounted but has no config.json; mount the checkpoint folder itself" >&2
    exit 64
fi

exec anchorage serve \
    --host "${ANCHORAGE_HOST:-0.0.0.0}" \
    --port "${ANCHORAGE_PORT:-8000}" \
    --slot-save-path "${ANCHORAGE_SLOT_SAVE_PATH:-/slots}" \
    "$@"
