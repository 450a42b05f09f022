#!/usr/bin/env bash
# Make a local stand-in for the Dockerfile's base image and load it into a
# (private) docker daemon under the exact name the Dockerfile's FROM line uses.
#
# What it is for: the CI docker check runs on machines that reach Debian's
# mirror and PyPI but no container registry, so `python:3.11.x-slim-bookworm`
# cannot be pulled. This script builds something shaped like it: Debian
# bookworm (debootstrap --variant=minbase) with Debian's python3 and a venv
# rooted at /usr/local, so `python` and `pip` sit at /usr/local/bin exactly
# where the official image has them and the Dockerfile needs no CI-only path.
#
# What it is not: the official image. Python's patch version (Debian 3.11.2),
# the bundled pip and the set of Debian packages differ. The Dockerfile only
# relies on `python -m venv`, `pip`, `useradd` and `/bin/sh`, which both have.
#
# Usage: make_base_image.sh IMAGE_NAME
#   env DOCKER          docker client to use (default: docker)
#   env CACHE_DIR       where the rootfs tarball is cached between runs
#   env DEBIAN_MIRROR   default http://deb.debian.org/debian
#
# The tarball is keyed on this script's content: editing the recipe below
# rebuilds it; an unchanged script reuses it (debootstrap takes minutes).
set -euo pipefail

image="${1:?usage: make_base_image.sh IMAGE_NAME}"
docker_cmd="${DOCKER:-docker}"
cache_dir="${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/anchorage-docker}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

log() { printf '[base-image] %s\n' "$*" >&2; }

key="$(sha256sum "$0" | cut -c1-16)"
tarball="$cache_dir/base-rootfs-$key.tar"
mkdir -p "$cache_dir"

# An image already loaded from this very recipe needs nothing more.
loaded_key="$($docker_cmd image inspect --format '{{ index .Config.Labels "anchorage.base-key" }}' "$image" 2>/dev/null || true)"
if [ "$loaded_key" = "$key" ]; then
    log "$image already loaded (recipe $key)"
    exit 0
fi

if [ ! -s "$tarball" ]; then
    command -v debootstrap >/dev/null || { log "debootstrap is not installed"; exit 1; }
    rootfs="$(mktemp -d "${TMPDIR:-/tmp}/anchorage-rootfs.XXXXXX")"
    # debootstrap leaves root-owned files; the trap removes them whatever happens.
    trap 'rm -rf "$rootfs" "$tarball.partial"' EXIT
    log "debootstrap bookworm (minbase) from $mirror into $rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
        || { tail -n 30 "$rootfs.log" >&2; rm -f "$rootfs.log"; exit 1; }
    rm -f "$rootfs.log"
    # A venv rooted at /usr/local puts python, python3 and pip in
    # /usr/local/bin, where the official image has them.
    chroot "$rootfs" /usr/bin/python3 -m venv /usr/local
    chroot "$rootfs" /usr/local/bin/python -c 'import ssl, venv, ensurepip'
    test -x "$rootfs/usr/local/bin/pip"
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/cache/apt/archives/*.deb
    tar --numeric-owner -C "$rootfs" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    # Older recipes' tarballs are dead weight once this one exists.
    find "$cache_dir" -maxdepth 1 -name 'base-rootfs-*.tar' ! -name "base-rootfs-$key.tar" -delete
    log "cached $tarball ($(du -h "$tarball" | cut -f1))"
else
    log "reusing cached $tarball"
fi

# The official image's environment, as far as the Dockerfile can notice it.
$docker_cmd import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "LABEL anchorage.base-key=$key" \
    --change 'LABEL anchorage.stand-in="debootstrap bookworm minbase + Debian python3; not the official image"' \
    --change 'CMD ["python3"]' \
    "$tarball" "$image" >/dev/null
log "imported $image (recipe $key)"
