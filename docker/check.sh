#!/usr/bin/env bash
# CI docker check (`make docker-check`): build the real Dockerfile, run the
# image with a tiny checkpoint at /model, and smoke-test it from the host.
#
# What it proves: the Dockerfile builds from a clean checkout with nothing
# but pyproject.toml's dependencies; the image starts, its HEALTHCHECK turns
# healthy, /health and one chat completion answer through a real port, the
# entry point picked the mounted checkpoint, and the server is not root; with
# nothing at /model the demo model serves, and a /model that is not a
# checkpoint stops the container instead.
#
# What it does not prove: anything about the official python base image. No
# registry is reachable here, so the FROM image is a local stand-in (see
# make_base_image.sh); and pip installs from a wheelhouse downloaded on the
# host (wheelhouse.sh), not from the index a user's build would reach.
# Containers use the host network (the private engine makes no bridge), so
# `-p` port publishing is not exercised.
#
# Isolation: the engine is private (engine.sh): own sockets, state and pid
# files, stopped by pid on exit whatever happens, along with the containers
# and the wheel server this script started. The image store persists in the
# cache directory so unchanged layers are reused; a lock serialises runs.
#
# Environment:
#   DOCKER_CHECK_PYTHON   host interpreter with the project installed
#                         (default: REPO/.venv/bin/python, else python3)
#   DOCKER_CHECK_MODEL    serve this checkpoint folder instead of building
#                         the tiny one (e.g. to try a real model)
#   DOCKER_CHECK_HEALTH_TIMEOUT  seconds to wait for `healthy` (default 300)
#   DOCKER_CHECK_NO_CACHE=1      build without the layer cache
#   ANCHORAGE_DOCKER_CACHE       cache dir (default ~/.cache/anchorage-docker)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
here="$repo/docker"
python="${DOCKER_CHECK_PYTHON:-}"
[ -n "$python" ] || { [ -x "$repo/.venv/bin/python" ] && python="$repo/.venv/bin/python" || python=python3; }
export CACHE_DIR="${ANCHORAGE_DOCKER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/anchorage-docker}"
health_timeout="${DOCKER_CHECK_HEALTH_TIMEOUT:-300}"
image_tag="anchorage:docker-check"
label="anchorage.docker-check"

passed=0 failed=0
t_start=$SECONDS t_phase=$SECONDS phase=""
say() { printf '[docker-check] %s\n' "$*" >&2; }
phase() {
    [ -n "$phase" ] && say "phase '$phase' took $((SECONDS - t_phase)) s"
    phase="$1" t_phase=$SECONDS
    say "== $1"
}
pass() { passed=$((passed + 1)); say "PASS $*"; }
fail() { failed=$((failed + 1)); say "FAIL $*"; }
# check NAME COMMAND...: one counted check, the command's output shown.
# check_ok tells the caller how it went (check itself always returns 0, so
# that set -e does not end the run at the first failed check).
check() {
    local name="$1" out; shift
    if out="$("$@" 2>&1)"; then
        pass "$name: $out"; check_ok=1
    else
        fail "$name: $out"; check_ok=0
    fi
}
summary() {
    [ -n "$phase" ] && say "phase '$phase' took $((SECONDS - t_phase)) s"
    phase=""
    say "total $((SECONDS - t_start)) s"
    printf '%d passed, %d failed\n' "$passed" "$failed"
}

# Everything this run starts is recorded here and undone on exit.
run_dir="$(mktemp -d /tmp/anchorage-docker.XXXXXX)"
ENGINE_RUN="$run_dir" ENGINE_STATE="$CACHE_DIR/engine"
wheel_server_pid="" checkpoint_pid="" model_dir="" container="" demo_container=""
# shellcheck source=docker/engine.sh
source "$here/engine.sh"

cleanup() {
    local status=$?
    set +e
    if [ -n "${ENGINE_DOCKERD_PID:-}" ] && kill -0 "$ENGINE_DOCKERD_PID" 2>/dev/null; then
        local name
        for name in $container $demo_container; do
            "$DOCKER" logs "$name" >"$run_dir/container-$name.log" 2>&1
        done
        local ids
        ids="$("$DOCKER" ps -aq --filter "label=$label" 2>/dev/null)"
        [ -n "$ids" ] && "$DOCKER" rm -f -v $ids >/dev/null 2>&1
        # Superseded builds of the check image, and build cache unused for
        # three days (old dependency layers): the persistent store stays at
        # about one image's worth instead of growing run after run.
        "$DOCKER" image prune -f --filter "label=$label" >/dev/null 2>&1
        "$DOCKER" builder prune -f --all --filter until=72h >/dev/null 2>&1
    fi
    engine_stop
    [ -n "$wheel_server_pid" ] && kill "$wheel_server_pid" 2>/dev/null
    [ -n "$checkpoint_pid" ] && kill "$checkpoint_pid" 2>/dev/null && wait "$checkpoint_pid" 2>/dev/null
    # Kept for a look after a failure: build, engine and container logs.
    rm -rf "$CACHE_DIR/last-run" && mkdir -p "$CACHE_DIR/last-run" \
        && cp "$run_dir"/*.log "$CACHE_DIR/last-run/" 2>/dev/null
    rm -rf "$run_dir"
    [ -n "$model_dir" ] && [ -z "${DOCKER_CHECK_MODEL:-}" ] && rm -rf "$model_dir"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# start_container NAME PORT [docker run options...]: host network, so the
# server's port is chosen through ANCHORAGE_PORT (the HEALTHCHECK follows it).
start_container() {
    local name="$1" port="$2"
    shift 2
    "$DOCKER" run --detach --name "$name" --label "$label=1" --network host \
        --env "ANCHORAGE_PORT=$port" "$@" "$image_tag" >/dev/null
}
# wait_healthy NAME: bounded wait for the image's own HEALTHCHECK verdict.
wait_healthy() {
    local state="" start=$SECONDS
    while [ $((SECONDS - start)) -lt "$health_timeout" ]; do
        state="$("$DOCKER" inspect --format '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' "$1")"
        [ "${state#* }" = healthy ] && { echo "healthy after $((SECONDS - start)) s"; return 0; }
        [ "${state%% *}" = running ] || break
        sleep 2
    done
    echo "not healthy after $((SECONDS - start)) s (state: $state); last log lines:"
    "$DOCKER" logs --tail 40 "$1" 2>&1
    return 1
}

# The checks that are more than one command; each prints what it saw.
image_user_is_not_root() {
    local u
    u="$("$DOCKER" image inspect --format '{{.Config.User}}' "$image_tag")"
    echo "USER $u"
    [ -n "$u" ] && [ "${u%%:*}" != 0 ] && [ "${u%%:*}" != root ]
}
exec_uid_is_not_root() {  # container
    local u
    u="$("$DOCKER" exec "$1" id -u)"
    echo "id -u = $u"
    [ -n "$u" ] && [ "$u" != 0 ]
}
server_uid_is_not_root() {  # host pid; Uid: real effective saved filesystem
    local line
    line="$(grep '^Uid:' "/proc/$1/status")"
    echo "pid $1 $line"
    set -- $line
    [ "$2" != 0 ] && [ "$3" != 0 ]
}
# server_cmdline_has PID TEXT / server_cmdline_lacks PID TEXT: the command
# line the entry point exec'd; a process that is gone fails both.
server_cmdline_has() { _server_cmdline_match "$1" "$2" 0; }
server_cmdline_lacks() { _server_cmdline_match "$1" "$2" 1; }
_server_cmdline_match() {
    local cmd
    [ "$1" -gt 0 ] && cmd="$(tr '\0' ' ' <"/proc/$1/cmdline")" && [ -n "$cmd" ] \
        || { echo "no server process (pid $1)"; return 2; }
    echo "$cmd"
    case "$cmd" in *"$2"*) return "$3" ;; *) return $((1 - $3)) ;; esac
}
mistaken_mount_is_refused() {
    local dir="$run_dir/not-a-checkpoint" status=0 out
    mkdir -p "$dir" && echo "weights live one folder down" >"$dir/README" && chmod -R a+rX "$dir"
    # Bounded: were the entry point to start the server anyway, this would
    # never return (cleanup removes the container by its label).
    out="$(timeout 120 "$DOCKER" run --rm --label "$label=1" --network none \
        --volume "$dir:/model:ro" "$image_tag" 2>&1)" || status=$?
    echo "exit $status: $out"
    [ "$status" = 64 ]
}

# Abort the run: count it, summarise, exit non-zero (cleanup runs on exit).
abort() { fail "$*"; summary; exit 1; }

# apt-get, debootstrap, chroot and dockerd all need it.
[ "$(id -u)" = 0 ] || abort "the docker check must run as root (it installs packages and runs dockerd)"

# One check run at a time: the image store and the caches are shared.
mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/lock"
flock -w 1800 9 || abort "another docker check held $CACHE_DIR/lock for 30 minutes"

phase "install engine"
engine_install || abort "could not install docker.io / debootstrap / BuildKit support"

phase "start private engine"
# 9>&-: the daemons (and the container shims they spawn) must not inherit
# the lock, or a shim outliving this run would block the next one.
engine_start 9>&- || abort "private dockerd did not start (logs above)"
# Containers a killed earlier run left behind in the persistent store.
stale="$("$DOCKER" ps -aq --filter "label=$label")"
[ -z "$stale" ] || "$DOCKER" rm -f -v $stale >/dev/null

phase "stand-in base image"
# The one image the Dockerfile names in FROM that is not one of its stages.
base_image="$(awk '
    toupper($1) == "FROM" {
        img = $2; if (img ~ /^--platform/) img = $3
        for (i = 2; i < NF; i++) if (toupper($i) == "AS") stage[$(i + 1)] = 1
        if (!(img in stage)) ext[img] = 1
    }
    END { for (i in ext) print i }' "$repo/Dockerfile")"
[ "$(printf '%s\n' "$base_image" | grep -c .)" = 1 ] \
    || abort "expected exactly one external FROM image in Dockerfile, found: $base_image"
say "Dockerfile builds FROM $base_image"
DOCKER="$DOCKER" "$here/make_base_image.sh" "$base_image" || abort "could not make the stand-in base image"

phase "wheelhouse"
wheelhouse="$(PYTHON="$python" "$here/wheelhouse.sh" "$repo")" || abort "could not download the wheels"
# The URL is a build arg, and build args are part of every later step's cache
# key: a fixed loopback address keeps it the same from run to run (any
# 127/8 address is local, and pip trusts loopback over plain http). If it is
# taken, a random port still works, at the price of a cold layer cache.
wheel_url=""
for wheel_addr in "127.77.7.7 38117" "127.0.0.1 0"; do
    set -- $wheel_addr
    "$python" -u -m http.server --bind "$1" --directory "$wheelhouse" "$2" \
        >"$run_dir/wheel-server.log" 2>&1 &
    wheel_server_pid=$!
    for _ in $(seq 50); do
        # "Serving HTTP on 127.77.7.7 port 38117 (http://127.77.7.7:38117/) ..."
        wheel_url="$(sed -n 's|.*(\(http://[^)]*\)).*|\1|p' "$run_dir/wheel-server.log")"
        [ -n "$wheel_url" ] || ! kill -0 "$wheel_server_pid" 2>/dev/null && break
        sleep 0.1
    done
    [ -n "$wheel_url" ] && break
    kill "$wheel_server_pid" 2>/dev/null; wheel_server_pid=""
done
set --
[ -n "$wheel_url" ] || abort "could not serve the wheelhouse on loopback"
say "serving $wheelhouse on $wheel_url (pid $wheel_server_pid)"

phase "docker build (tiny checkpoint built alongside)"
# The checkpoint is host work that needs nothing from the build: overlap them.
if [ -n "${DOCKER_CHECK_MODEL:-}" ]; then
    model_dir="$DOCKER_CHECK_MODEL"
else
    model_dir="$(mktemp -d /tmp/anchorage-model.XXXXXX)"
    (cd "$repo" && exec "$python" -m models.tiny_checkpoint --family qwen3 --out "$model_dir") \
        >"$run_dir/checkpoint.log" 2>&1 &
    checkpoint_pid=$!
fi
build_args=(--network host --progress plain --tag "$image_tag" --label "$label=1"
    --build-arg PIP_NO_INDEX=1 --build-arg "PIP_FIND_LINKS=$wheel_url")
[ "${DOCKER_CHECK_NO_CACHE:-0}" = 1 ] && build_args+=(--no-cache)
t_build=$SECONDS
if DOCKER_BUILDKIT=1 "$DOCKER" build "${build_args[@]}" "$repo" >"$run_dir/build.log" 2>&1; then
    size_mb=$(( $("$DOCKER" image inspect --format '{{.Size}}' "$image_tag") / 1000000 ))
    pass "docker build in $((SECONDS - t_build)) s ($(grep -c '^#[0-9]* CACHED' "$run_dir/build.log" || true) steps from cache), image $size_mb MB"
else
    tail -n 40 "$run_dir/build.log" >&2
    abort "docker build"
fi
check "image runs as a non-root user" image_user_is_not_root
if [ -n "$checkpoint_pid" ]; then
    wait "$checkpoint_pid" \
        || { tail -n 20 "$run_dir/checkpoint.log" >&2; checkpoint_pid=""; abort "could not build the tiny checkpoint"; }
    checkpoint_pid=""
fi
# The server runs as uid 10001: the folder must be readable by others.
# (A folder given in DOCKER_CHECK_MODEL is the caller's and is left alone.)
[ -n "${DOCKER_CHECK_MODEL:-}" ] || chmod -R a+rX "$model_dir"
[ -f "$model_dir/config.json" ] || abort "$model_dir has no config.json"

phase "docker run"
# Two containers from the same image, started together: one with the tiny
# checkpoint at /model (the smoke checks run against it), one with nothing
# mounted there (the demo-model fallback).
port="$(free_port)" demo_port="$(free_port)"
container="anchorage-check-$$" demo_container="anchorage-check-demo-$$"
start_container "$container" "$port" --volume "$model_dir:/model:ro" \
    || abort "docker run (checkpoint at /model)"
start_container "$demo_container" "$demo_port" || abort "docker run (nothing at /model)"
if out="$(wait_healthy "$container" 2>&1)"; then
    pass "HEALTHCHECK of the container with /model mounted: $out"
else
    printf '%s\n' "$out" >&2
    abort "HEALTHCHECK of the container with /model mounted: not healthy"
fi

phase "smoke"
base_url="http://127.0.0.1:$port"
check "/health from the host" "$python" "$here/smoke.py" health "$base_url"
check "chat completion" "$python" "$here/smoke.py" chat "$base_url"
check "docker exec id -u is not 0" exec_uid_is_not_root "$container"
# The server process itself, seen from the host's /proc (no user namespace
# remapping here, so host and container uids agree).
server_pid="$("$DOCKER" inspect --format '{{.State.Pid}}' "$container")"
check "server process uid is not 0" server_uid_is_not_root "$server_pid"
check "entry point passed the mounted /model" server_cmdline_has "$server_pid" "--model /model "
check "/slots volume is writable by the server user" \
    "$DOCKER" exec "$container" sh -c 'touch /slots/.probe && rm /slots/.probe && echo ok'

phase "entry point fallbacks"
check "with nothing at /model the demo model turns healthy" wait_healthy "$demo_container"
if [ "$check_ok" = 1 ]; then
    check "/health of the demo-model container" "$python" "$here/smoke.py" health "http://127.0.0.1:$demo_port"
    demo_pid="$("$DOCKER" inspect --format '{{.State.Pid}}' "$demo_container")"
    check "entry point passed no --model for an empty /model" server_cmdline_lacks "$demo_pid" "--model"
else
    say "SKIP /health and command line of the demo-model container (it is not running)"
fi
check "a /model without config.json stops the container with a message" mistaken_mount_is_refused

summary
[ "$failed" -eq 0 ]
