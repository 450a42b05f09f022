"""The servers compared: how each is prepared, started, and spoken to.

Every peer serves the same checkpoint folder (or its GGUF conversion) in
bf16 on loopback with all cores, and is sent the same `/v1/completions`
requests: greedy, a fixed number of new tokens with EOS ignored. Each peer
has its own spelling of "ignore EOS", which is the point of `payload()`:

- anchorage: `ignore_eos: true`; reports `usage` (with
  `prompt_tokens_details.cached_tokens`) on the last chunk when asked.
- transformers serve (continuous batching): no `ignore_eos`; a per-request
  `generation_config` whose `eos_token_id` no sampled id can equal (-1)
  does the same, and CB reads `max_new_tokens` and `eos_token_id` per request.
- llama-server (llama.cpp's own server): `n_predict` and `ignore_eos`;
  reports `timings` (`cache_n`, `prompt_n`, `predicted_n`).
- llama-cpp-python's server: no `ignore_eos`; `logit_bias` -100 on the EOS
  and special ids. It serves one request at a time by design.

A `Profile` says what a run needs from the server (sequences at once,
context per sequence, a slot folder, anchors on or off).

Not for: process handling (bench.servers) or timing (bench.loadgen).
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench import servers
from bench.venvs import LlamaCpp, PeerUnavailable, llama_cpp, llama_server, transformers_venv
from server.child_process import free_port

@dataclass(frozen=True)
class Profile:
    max_seqs: int = 32
    ctx_per_seq: int = 2048
    slot_dir: Path | None = None
    anchors: bool = True
    # CPU threads every peer computes with. All cores is each server's
    # default, but on a machine shared with other jobs, more threads than
    # free cores makes every step wait on a descheduled thread (measured
    # here: a decode step 8x slower with 2 threads than with 1 while another
    # job held a core), so the run can ask for fewer, the same for all peers.
    threads: int = field(default_factory=lambda: cores())


def cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


class Peer:
    name = "peer"
    http = True
    supports_slots = False

    def prepare(self, model_dir: Path) -> None:
        """Install / convert what this peer needs; raises PeerUnavailable with the reason."""

    def versions(self) -> dict[str, str]:
        return {}

    @contextmanager
    def server(self, model_dir: Path, profile: Profile):
        raise NotImplementedError
        yield

    def payload(self, prompt, max_tokens: int, **extra) -> dict:
        raise NotImplementedError


class Anchorage(Peer):
    name = "anchorage"
    supports_slots = True

    def versions(self):
        from importlib import metadata

        return {"anchorage": _git_describe(), "torch": metadata.version("torch")}

    @contextmanager
    def server(self, model_dir, profile):
        port = free_port()
        exe = Path(sys.executable).with_name("anchorage")
        argv = [str(exe), "serve", "--model", str(model_dir), "--port", str(port), "--dtype", "bfloat16",
                "--max-num-seqs", str(profile.max_seqs), "--max-model-len", str(profile.ctx_per_seq),
                "--log-level", "warning", "--anchors" if profile.anchors else "--no-anchors",
                "--threads", str(profile.threads)]
        if profile.slot_dir:
            argv += ["--slot-save-path", str(profile.slot_dir), "--parallel", "1"]
        with servers.running(self.name, argv, port) as base:
            yield base

    def payload(self, prompt, max_tokens, **extra):
        return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}, **extra}


class TransformersServe(Peer):
    name = "transformers serve"

    def prepare(self, model_dir):
        self.python = transformers_venv()
        self.model_id = str(model_dir)

    def versions(self):
        out = subprocess.run([str(self.python), "-c", "import torch, transformers, accelerate; "
                              "print(transformers.__version__, torch.__version__, accelerate.__version__)"],
                             capture_output=True, text=True)
        t, torch_v, acc = (out.stdout.split() + ["?"] * 3)[:3]
        return {"transformers (serve venv)": t, "torch (serve venv)": torch_v, "accelerate": acc}

    @contextmanager
    def server(self, model_dir, profile):
        port = free_port()
        self.model_id = str(model_dir)
        argv = [str(self.python.with_name("transformers")), "serve", str(model_dir), "--continuous-batching",
                "--device", "cpu", "--dtype", "bfloat16", "--host", "127.0.0.1", "--port", str(port),
                "--log-level", "warning"]
        # No threads flag: torch reads OMP_NUM_THREADS at start-up.
        env = {"OMP_NUM_THREADS": str(profile.threads)}
        with servers.running(self.name.replace(" ", "-"), argv, port, env=env) as base:
            yield base

    def payload(self, prompt, max_tokens, **extra):
        if not isinstance(prompt, str):
            raise PeerUnavailable("transformers serve takes text prompts only")
        gen = {"do_sample": False, "max_new_tokens": max_tokens, "eos_token_id": -1}
        return {"model": self.model_id, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                "stream": True, "generation_config": json.dumps(gen), **extra}


class _LlamaBase(Peer):
    def prepare(self, model_dir):
        from bench.gguf import to_gguf

        self.lc: LlamaCpp = llama_cpp()
        self.gguf = to_gguf(model_dir, self.lc)

    def versions(self):
        out = subprocess.run([str(self.lc.python), "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                             capture_output=True, text=True)
        return {"llama-cpp-python": out.stdout.strip() or "?", "llama.cpp commit": self.lc.commit}


class LlamaServer(_LlamaBase):
    name = "llama.cpp server"
    supports_slots = True

    def prepare(self, model_dir):
        super().prepare(model_dir)
        self.exe = llama_server(self.lc)

    def versions(self):
        out = subprocess.run([str(self.exe), "--version"], capture_output=True, text=True)
        line = next((ln for ln in (out.stdout + out.stderr).splitlines() if ln.startswith("version:")), "version: ?")
        return {**super().versions(), "llama-server": line.split(":", 1)[1].strip()}

    @contextmanager
    def server(self, model_dir, profile):
        from bench.gguf import to_gguf

        gguf = to_gguf(model_dir, self.lc)
        port = free_port()
        # -c is the whole KV cache; with a unified cache every slot may use all of it.
        argv = [str(self.exe), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
                "-c", str(profile.ctx_per_seq * profile.max_seqs), "-np", str(profile.max_seqs),
                "-t", str(profile.threads), "-tb", str(profile.threads), "--kv-unified", "--no-webui"]
        if profile.slot_dir:
            argv += ["--slot-save-path", str(profile.slot_dir)]
        with servers.running("llama-server", argv, port) as base:
            yield base

    def payload(self, prompt, max_tokens, **extra):
        return {"prompt": prompt, "max_tokens": max_tokens, "n_predict": max_tokens, "temperature": 0,
                "ignore_eos": True, "stream": True, "cache_prompt": True,
                "stream_options": {"include_usage": True}, **extra}


class LlamaCppPython(_LlamaBase):
    name = "llama-cpp-python server"

    @contextmanager
    def server(self, model_dir, profile):
        from bench.gguf import to_gguf

        gguf = to_gguf(model_dir, self.lc)
        port = free_port()
        self.no_eos = _special_ids(model_dir)
        argv = [str(self.lc.python), "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                "--port", str(port), "--n_ctx", str(profile.ctx_per_seq), "--n_threads", str(profile.threads),
                "--n_threads_batch", str(profile.threads), "--n_batch", "512",
                # Its default lets a new request cut off the one streaming; queue them instead.
                "--interrupt_requests", "False"]
        with servers.running("llama-cpp-python", argv, port, health="/v1/models") as base:
            yield base

    def payload(self, prompt, max_tokens, **extra):
        return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "logit_bias": {str(i): -100.0 for i in self.no_eos}, **extra}


def _special_ids(model_dir: Path) -> list[int]:
    cfg = json.loads((model_dir / "config.json").read_text())
    eos = cfg.get("eos_token_id")
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    ids |= {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
    return sorted(ids)


def _git_describe() -> str:
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h %cs"], capture_output=True, text=True)
    return f"git {out.stdout.strip()}" if out.returncode == 0 else "unknown"


ALL = {"anchorage": Anchorage, "transformers": TransformersServe, "llama-server": LlamaServer,
       "llama-cpp-python": LlamaCppPython}
