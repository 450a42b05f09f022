# Private container engine for the CI docker check; sourced by check.sh.
#
# What it is for: CI machines have no container engine. This installs
# Debian's docker.io (and debootstrap, for the stand-in base image) and runs
# a containerd + dockerd pair that belong to this check alone: their own
# state directories, sockets, pid files and config files, and no iptables or
# bridge changes (containers use the host network). Any other dockerd on the
# machine, its socket, /var/lib/docker and /etc/docker, are never read or
# touched. (dockerd 20.10 does create the empty plugin-discovery folder
# /run/docker/plugins and containerd its shim socket folder /run/containerd/s;
# neither path can be moved, and both are shared by design.)
#
# What it is not: a general docker installer. Stopping is by recorded pid,
# never by process name.
#
# Why containerd is started here rather than left to dockerd: dockerd 20.10
# adopts /run/containerd/containerd.sock when a system containerd runs,
# which would share state with whoever owns it. An explicit --containerd
# keeps the pair private in every case.
#
# Inputs (variables set by the caller):
#   ENGINE_STATE  persistent directory (image store, reused between runs)
#   ENGINE_RUN    short-lived directory (sockets, pid files, logs); unix
#                 socket paths must stay under ~100 characters
# Outputs: DOCKER (client command), DOCKER_HOST, DOCKER_CONFIG exported,
#          ENGINE_DRIVER (overlay2 or vfs).

# Debian's binaries, by path: a statically linked client some machines carry
# in /usr/local/bin has no buildx and fails with BuildKit on.
DOCKER=/usr/bin/docker
DOCKERD=/usr/sbin/dockerd
CONTAINERD=/usr/bin/containerd

engine_log() { printf '[engine] %s\n' "$*" >&2; }

engine_install() {
    local missing=()
    [ -x "$DOCKER" ] && [ -x "$DOCKERD" ] && [ -x "$CONTAINERD" ] || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    if [ "${#missing[@]}" -gt 0 ]; then
        engine_log "installing ${missing[*]} with apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >&2
    fi
    engine_buildkit_ready
}

# BuildKit needs either buildx or a client old enough to carry BuildKit
# itself (the classic client before 23.0, which Debian bookworm ships).
engine_buildkit_ready() {
    "$DOCKER" buildx version >/dev/null 2>&1 && return 0
    local major
    major="$("$DOCKER" --version | sed -E 's/^Docker version ([0-9]+)\..*/\1/')"
    [ "$major" -lt 23 ] && return 0
    engine_log "docker client $major has no buildx; installing docker-buildx"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-buildx >&2 \
        && "$DOCKER" buildx version >/dev/null 2>&1
}

_engine_wait_socket() {  # pid socket seconds
    local i
    for ((i = 0; i < $3 * 5; i++)); do
        kill -0 "$1" 2>/dev/null || return 1
        [ -S "$2" ] && return 0
        sleep 0.2
    done
    return 1
}

_engine_start_dockerd() {  # driver
    mkdir -p "$ENGINE_STATE/data-$1" "$ENGINE_RUN/exec"
    # 20.10 writes a trust key to /etc/docker/key.json unless told otherwise.
    printf '{"deprecated-key-path": "%s"}\n' "$ENGINE_STATE/key.json" >"$ENGINE_RUN/daemon.json"
    "$DOCKERD" \
        --config-file "$ENGINE_RUN/daemon.json" \
        --data-root "$ENGINE_STATE/data-$1" \
        --exec-root "$ENGINE_RUN/exec" \
        --pidfile "$ENGINE_RUN/dockerd.pid" \
        --host "unix://$ENGINE_RUN/docker.sock" \
        --containerd "$ENGINE_RUN/containerd.sock" \
        --storage-driver "$1" \
        --iptables=false --ip-masq=false --bridge=none \
        >>"$ENGINE_RUN/dockerd.log" 2>&1 &
    ENGINE_DOCKERD_PID=$!
    # The socket appears before the daemon answers; ask it something.
    _engine_wait_socket "$ENGINE_DOCKERD_PID" "$ENGINE_RUN/docker.sock" 60 || return 1
    local i
    for ((i = 0; i < 100; i++)); do
        "$DOCKER" info >/dev/null 2>&1 && return 0
        kill -0 "$ENGINE_DOCKERD_PID" 2>/dev/null || return 1
        sleep 0.3
    done
    return 1
}

engine_start() {
    mkdir -p "$ENGINE_STATE" "$ENGINE_RUN"
    export DOCKER_HOST="unix://$ENGINE_RUN/docker.sock"
    # A client config of our own: no credential helpers or contexts from ~/.docker.
    export DOCKER_CONFIG="$ENGINE_RUN/client"
    mkdir -p "$DOCKER_CONFIG"

    cat >"$ENGINE_RUN/containerd.toml" <<EOF
version = 2
root = "$ENGINE_STATE/containerd"
state = "$ENGINE_RUN/containerd-state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$ENGINE_RUN/containerd.sock"
[ttrpc]
  address = "$ENGINE_RUN/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$ENGINE_STATE/containerd-opt"
EOF
    "$CONTAINERD" --config "$ENGINE_RUN/containerd.toml" >>"$ENGINE_RUN/containerd.log" 2>&1 &
    ENGINE_CONTAINERD_PID=$!
    if ! _engine_wait_socket "$ENGINE_CONTAINERD_PID" "$ENGINE_RUN/containerd.sock" 30; then
        engine_log "containerd did not start:"; tail -n 20 "$ENGINE_RUN/containerd.log" >&2
        return 1
    fi

    ENGINE_DRIVER=overlay2
    if ! _engine_start_dockerd overlay2; then
        engine_log "dockerd did not start with overlay2:"; tail -n 15 "$ENGINE_RUN/dockerd.log" >&2
        _engine_stop_pid "$ENGINE_DOCKERD_PID" dockerd
        engine_log "FALLING BACK to the vfs storage driver (slow: every layer is a full copy)"
        ENGINE_DRIVER=vfs
        if ! _engine_start_dockerd vfs; then
            engine_log "dockerd did not start with vfs either:"; tail -n 15 "$ENGINE_RUN/dockerd.log" >&2
            return 1
        fi
    fi
    engine_log "private dockerd pid $ENGINE_DOCKERD_PID on $DOCKER_HOST, driver $ENGINE_DRIVER," \
        "data root $ENGINE_STATE/data-$ENGINE_DRIVER"
}

_engine_stop_pid() {  # pid name
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 0
    kill -TERM "$1" 2>/dev/null || true
    local i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.2
    done
    engine_log "$2 (pid $1) ignored SIGTERM for 20 s; sending SIGKILL"
    kill -KILL "$1" 2>/dev/null || true
}

# Safe to call at any point of start-up, and more than once.
engine_stop() {
    _engine_stop_pid "${ENGINE_DOCKERD_PID:-}" dockerd
    _engine_stop_pid "${ENGINE_CONTAINERD_PID:-}" containerd
    ENGINE_DOCKERD_PID= ENGINE_CONTAINERD_PID=
    # dockerd unmounts what it mounted when it shuts down cleanly; a killed
    # daemon, or one that failed to start (it bind-mounts its data root
    # early), leaves mounts behind. Both folders are this engine's alone.
    local dir
    for dir in "${ENGINE_RUN:-}" "${ENGINE_STATE:-}"; do
        [ -n "$dir" ] && [ -d "$dir" ] || continue
        awk -v root="$dir/" 'index($2, root) == 1 { print $2 }' /proc/mounts \
            | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    done
}
