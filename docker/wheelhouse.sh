#!/usr/bin/env bash
# Download every wheel the image build needs into a local wheelhouse and
# print its path on stdout.
#
# What it is for: the CI docker check builds the image with the network cut
# off from package indexes (pip runs with PIP_NO_INDEX=1 and a loopback
# --find-links), so the wheels are fetched here, on the host, for the image's
# interpreter and platform: CPython 3.11, manylinux x86_64 up to glibc 2.31
# (the image is Debian bookworm, glibc 2.36; llguidance >= 1.7 ships only
# manylinux_2_31 wheels). The requirement
# list is read from pyproject.toml (build-system requires + dependencies), so
# adding a dependency there needs no edit here.
#
# torch: pyproject pins torch==2.13.0. On these machines the CPU wheel
# (2.13.0+cpu) lies in /opt/wheels and the host's pip is pointed at it
# (PIP_FIND_LINKS); a local version label sorts above the plain release, so
# pip takes the CPU wheel rather than PyPI's multi-GB CUDA build. The
# directory is added explicitly when it exists so the result does not depend
# on the caller's environment.
#
# Usage: wheelhouse.sh REPO_DIR
#   env PYTHON     interpreter whose pip downloads (>= 3.11 for tomllib)
#   env CACHE_DIR  wheelhouses are cached there, keyed on the requirement
#                  list and this script, so a second run costs nothing
set -euo pipefail

repo="${1:?usage: wheelhouse.sh REPO_DIR}"
python="${PYTHON:-python3}"
cache_dir="${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/anchorage-docker}"

log() { printf '[wheelhouse] %s\n' "$*" >&2; }

reqs="$("$python" - "$repo/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    meta = tomllib.load(f)
for req in meta["build-system"]["requires"] + meta["project"]["dependencies"]:
    print(req)
EOF
)"
key="$(printf '%s\n' "$reqs" | cat - "$0" | sha256sum | cut -c1-16)"
out="$cache_dir/wheelhouse-$key"

if [ -f "$out/.complete" ]; then
    log "reusing $out"
    printf '%s\n' "$out"
    exit 0
fi

find_links=()
for dir in ${PIP_FIND_LINKS:-} /opt/wheels; do
    [ -d "$dir" ] && find_links+=(--find-links "$dir")
done

mkdir -p "$cache_dir"
tmp="$(mktemp -d "$cache_dir/wheelhouse-tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
printf '%s\n' "$reqs" >"$tmp/requirements.txt"
log "downloading $(printf '%s\n' "$reqs" | wc -l) requirements (+ their dependencies) for cp311 manylinux x86_64"
"$python" -m pip download --quiet --disable-pip-version-check \
    --dest "$tmp" --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 \
    "${find_links[@]}" \
    --requirement "$tmp/requirements.txt" >&2
rm "$tmp/requirements.txt"

torch_wheel="$(cd "$tmp" && ls torch-*.whl)"
case "$torch_wheel" in
    *+cpu*) log "torch wheel: $torch_wheel" ;;
    *) log "torch wheel is $torch_wheel, not a CPU build: the image would carry CUDA libraries"
       log "(put the torch CPU wheel in a --find-links directory, e.g. /opt/wheels)"
       exit 1 ;;
esac

touch "$tmp/.complete"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
# Wheelhouses for older requirement lists are dead weight.
find "$cache_dir" -maxdepth 1 -name 'wheelhouse-*' ! -name 'wheelhouse-tmp.*' ! -name "wheelhouse-$key" -exec rm -rf {} +
log "$(ls "$out" | wc -l) wheels, $(du -sh "$out" | cut -f1) in $out"
printf '%s\n' "$out"
