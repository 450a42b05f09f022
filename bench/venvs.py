"""Peers' own virtual environments in the benchmark's work folder, never the project's.

Each peer is installed by pip from the package registry into a venv of its
own, pinned, and marked with a stamp holding what was asked for; a venv whose
stamp matches is reused, any other is rebuilt. The pins are the benchmark's
record of what it measured (the report prints the installed versions too).

- transformers: the same transformers version as the project's venv (so the
  in-process `generate` baseline and `transformers serve` are one library),
  torch pinned as the project pins it (pip finds the CPU wheel on disk),
  `accelerate` and the `serving` extra.
- llama.cpp: `llama-cpp-python[server]` built from its source distribution
  (nice -n 19, one compile job: the machine is shared), with a build folder
  kept in the work folder (bench.checkpoints.WORK) so that llama.cpp's own `llama-server` can be built
  afterwards from the same vendored source and the same objects; the sdist
  also carries `convert_hf_to_gguf.py` and `gguf-py`, used by bench.gguf.

Not for: starting servers (bench.servers) or converting checkpoints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bench.checkpoints import WORK

VENVS = WORK / "venvs"
DOWNLOADS = WORK / "dl"
BUILD = WORK / "build"
LOGS = WORK / "logs"
LLAMA_CPP_PYTHON = "0.3.36"
TORCH = "2.13.0"
# Only what a CPU build needs: no tests, examples or multimodal library.
LLAMA_CMAKE_ARGS = "-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"


class PeerUnavailable(RuntimeError):
    """A peer cannot run here; the message is the reason the report prints."""


def _base_python() -> str:
    # The project venv's interpreter is a venv itself; build peers' venvs from
    # the interpreter it was made from, so they do not see the project's packages.
    return getattr(sys, "_base_executable", None) or shutil.which("python3") or sys.executable


def run_logged(cmd: list[str], log: Path, env: dict | None = None, nice: bool = False) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    if nice:
        cmd = ["nice", "-n", "19", *cmd]
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise PeerUnavailable(f"`{' '.join(cmd[:6])} ...` failed (exit {proc.returncode}); log {log}:\n" + "\n".join(tail))


def ensure_venv(name: str, spec: dict, install) -> Path:
    """The venv `name`, (re)built by `install(python, log)` unless its stamp equals `spec`."""
    root = VENVS / name
    python = root / "bin" / "python"
    stamp = root / ".bench-spec.json"
    if python.exists() and stamp.is_file() and json.loads(stamp.read_text()) == spec:
        return python
    log = LOGS / f"{name}-install.log"
    print(f"[bench] installing {name} into {root} (log {log}); this happens once", flush=True)
    if not python.exists():
        run_logged([_base_python(), "-m", "venv", str(root)], log)
    install(python, log)
    stamp.write_text(json.dumps(spec))
    return python


def transformers_venv() -> Path:
    version = metadata.version("transformers")
    spec = {"torch": TORCH, "transformers": version, "extras": ["serving"], "accelerate": True}

    def install(python: Path, log: Path) -> None:
        run_logged([str(python), "-m", "pip", "install", "--quiet", f"torch=={TORCH}",
              f"transformers[serving]=={version}", "accelerate"], log)

    return ensure_venv("transformers", spec, install)


@dataclass
class LlamaCpp:
    python: Path
    source: Path  # the unpacked sdist
    build_dir: Path
    commit: str  # llama.cpp commit vendored by this llama-cpp-python release

    @property
    def llama_cpp_dir(self) -> Path:
        return self.source / "vendor" / "llama.cpp"


def _sdist() -> Path:
    src = DOWNLOADS / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
    if (src / "pyproject.toml").is_file():
        return src
    tarball = DOWNLOADS / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if not tarball.is_file():
        helper = ensure_venv("sdist-fetch", {"scikit-build-core": True}, lambda py, log: run_logged(
            [str(py), "-m", "pip", "install", "--quiet", "scikit-build-core"], log))
        DOWNLOADS.mkdir(parents=True, exist_ok=True)
        run_logged([str(helper), "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
              "--no-build-isolation", "-d", str(DOWNLOADS), f"llama-cpp-python=={LLAMA_CPP_PYTHON}"],
             LOGS / "llamacpp-download.log")
    with tarfile.open(tarball) as tar:
        tar.extractall(DOWNLOADS, filter="data")
    return src


def _vendored_commit(src: Path) -> str:
    head = src / ".git" / "modules" / "vendor" / "llama.cpp" / "HEAD"
    if head.is_file():
        return head.read_text().strip()
    for line in (src / "CHANGELOG.md").read_text().splitlines():
        if "update llama.cpp to" in line:
            return line.rsplit("@", 1)[-1].strip()
    return "unknown"


def llama_cpp() -> LlamaCpp:
    src = _sdist()
    build = BUILD / "llamacpp"
    spec = {"llama-cpp-python": LLAMA_CPP_PYTHON, "cmake": LLAMA_CMAKE_ARGS, "extras": ["server"]}

    def install(python: Path, log: Path) -> None:
        # Built in place from the unpacked sdist with a kept build folder, so
        # llama-server can later be compiled against the same configuration.
        env = {"CMAKE_BUILD_PARALLEL_LEVEL": "1", "CMAKE_ARGS": LLAMA_CMAKE_ARGS}
        run_logged([str(python), "-m", "pip", "install", "-v", f"{src}[server]",
              f"--config-settings=build-dir={build}"], log, env=env, nice=True)

    python = ensure_venv("llamacpp", spec, install)
    return LlamaCpp(python, src, build, _vendored_commit(src))


def llama_server(lc: LlamaCpp) -> Path:
    """llama.cpp's own HTTP server, compiled from the vendored source in the kept build folder.

    llama-cpp-python's server serves one request at a time and has no slot
    save/restore; llama-server is what llama.cpp users deploy. Turning the
    server on in the existing CMake cache recompiles only the server and its
    helpers, not ggml. The web UI is not built (it would need npm or a download).
    """
    out = lc.build_dir / "bin" / "llama-server"
    if out.is_file():
        return out
    if not (lc.build_dir / "CMakeCache.txt").is_file():
        raise PeerUnavailable(f"no llama.cpp build folder at {lc.build_dir}; the llama-cpp-python build did not keep it")
    log = LOGS / "llama-server-build.log"
    print(f"[bench] building llama-server (log {log}); this happens once", flush=True)
    run_logged(["cmake", "-S", str(lc.source), "-B", str(lc.build_dir), "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
          "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"], log)
    run_logged(["cmake", "--build", str(lc.build_dir), "--target", "llama-server", "-j", "1"], log, nice=True)
    found = list(lc.build_dir.rglob("llama-server"))
    found = [f for f in found if f.is_file() and os.access(f, os.X_OK)]
    if not found:
        raise PeerUnavailable(f"llama-server did not appear under {lc.build_dir} (log {log})")
    if found[0] != out:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(found[0], out)
    return out
