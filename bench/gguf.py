"""Convert a benchmark checkpoint to GGUF with llama.cpp's own conversion script.

The script is `convert_hf_to_gguf.py` from the llama.cpp source vendored in
the llama-cpp-python sdist (the same commit the llama.cpp peers run), run in
a venv of its own (torch, transformers, sentencepiece, llama.cpp's gguf-py)
so neither the project's venv nor a peer's is touched. Weights stay bf16,
like every other peer's.

The converter names the BPE pre-tokenizer by hashing how the tokenizer splits
a test string and refuses a hash it has never seen, which a locally trained
tokenizer always is. Ours uses Qwen2's split regex, so the converter is told
"qwen2", the llama.cpp pre-tokenizer with that exact regex ("gpt-2" would
split numbers and contractions differently and change prompt lengths); the
benchmark checks prompt token counts across peers anyway.

Not for: building or installing llama.cpp (bench.venvs).
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.venvs import LOGS, TORCH, LlamaCpp, ensure_venv, run_logged

PRE_TOKENIZER = "qwen2"

# Run inside the converter venv: patch the pre-tokenizer lookup, then run the
# script as __main__ with the caller's arguments.
_WRAPPER = """
import runpy, sys
llama_dir = sys.argv.pop(1)
pre = sys.argv.pop(1)
sys.path[:0] = [llama_dir, llama_dir + "/gguf-py"]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv[0] = llama_dir + "/convert_hf_to_gguf.py"
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def converter_venv(lc: LlamaCpp) -> Path:
    from importlib import metadata

    version = metadata.version("transformers")
    gguf_py = lc.llama_cpp_dir / "gguf-py"
    spec = {"torch": TORCH, "transformers": version, "gguf-py": str(gguf_py), "sentencepiece": True}

    def install(python: Path, log: Path) -> None:
        run_logged([str(python), "-m", "pip", "install", "--quiet", f"torch=={TORCH}", f"transformers=={version}",
              "sentencepiece", "protobuf>=4.21,<5", "safetensors", "numpy", str(gguf_py)], log)

    return ensure_venv("gguf", spec, install)


def to_gguf(model_dir: Path, lc: LlamaCpp) -> Path:
    """`<model_dir>.bf16.gguf`, converted once."""
    out = model_dir.with_name(model_dir.name + ".bf16.gguf")
    if out.is_file():
        return out
    python = converter_venv(lc)
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    log = LOGS / f"gguf-{model_dir.name}.log"
    print(f"[bench] converting {model_dir.name} to GGUF (log {log})", flush=True)
    run_logged([str(python), "-c", _WRAPPER, str(lc.llama_cpp_dir), PRE_TOKENIZER, str(model_dir),
          "--outfile", str(tmp), "--outtype", "bf16"], log)
    tmp.rename(out)
    return out


if __name__ == "__main__":  # python -m bench.gguf MODEL_DIR
    from bench.venvs import llama_cpp

    print(to_gguf(Path(sys.argv[1]), llama_cpp()))
