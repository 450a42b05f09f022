"""The one configuration source: CLI flags, ANCHORAGE_* variables, a config file.

`ServeSettings` is a pydantic-settings object, so one declaration gives the
`anchorage serve` flags (kebab-case, `--anchors/--no-anchors`), the
environment variables (`ANCHORAGE_PORT=9000`) and an optional TOML config file
(`--config configs/server.toml` or `ANCHORAGE_CONFIG`). Precedence, highest
first: flags, environment, config file, defaults. Values discovered at run
time (page counts, the context length actually used) are not settings; they
live in `server/runtime.py`'s `RuntimeInfo`.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import (
    BaseSettings,
    CliApp,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


class ServeSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ANCHORAGE_",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_prog_name="anchorage serve",
        cli_exit_on_error=False,
        extra="forbid",
    )

    config: Path | None = Field(None, description="TOML file with any of these settings (flags and env win over it)")
    model: Path | None = Field(None, description="Hugging Face model folder; default: the built-in demo model")
    served_model_name: str | None = Field(None, description="model id reported by /v1/models and required in requests (default: the folder name)")
    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8000, ge=0, le=65535, description="port to listen on")
    api_key: str | None = Field(None, description="require this key (Authorization: Bearer or X-Api-Key) on every route but /health, /v1/health and /v1/models")
    allowed_origins: str = Field("", description="origins a browser page may call the API from (CORS), comma-separated, or * for any (llama.cpp's and vLLM's default); empty (the default): none, so a web page the user visits cannot drive a server that has no --api-key")
    admin_api_key: str | None = Field(None, description="a separate key for the slot admin actions (save/restore/erase)")
    dtype: Literal["bfloat16", "float32", "float16"] = Field("bfloat16", description="model dtype: the KV pool and slot files use it")
    compute_dtype: Literal["auto", "bfloat16", "float32", "float16"] = Field(
        "auto", description="dtype weights are held and computed in; auto: --dtype where the CPU has it natively, else float32 plus --dtype copies for calls of few rows where measured faster at load")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default: all cores)")
    prepacked_weights: bool = Field(True, description="where the model computes in bf16 natively, reorder its Linear weights at load into oneDNN's blocked layout (decode streams them about twice as fast; a tied head too, its embedding rows then read from the checkpoint file)")

    max_model_len: int | None = Field(None, ge=16, description="context length per sequence (default: the model's, capped at 32768)")
    page_size: int = Field(16, ge=1, le=1024, description="tokens per KV page")
    kv_cache_tokens: int | None = Field(None, ge=16, description="tokens of full-attention KV pool (default: what is left of 2 GiB after the window pool, at most 1,048,576, at least one max_model_len sequence and a page)")
    swa_pool_tokens: int | None = Field(None, ge=16, description="tokens of sliding-window KV pool (default: the floor for max_num_seqs plus one prefill chunk and two pages, up to twice that while it fits in half of 2 GiB)")
    max_num_seqs: int = Field(16, ge=1, le=1024, description="sequences decoding at once")
    max_batched_tokens: int = Field(512, ge=16, description="tokens per engine step (chunked-prefill budget)")
    anchors: bool = Field(True, description="anchor-aware window eviction at the first tool call of a turn")
    tool_call_grammar: bool = Field(True, description="once the model opens a tool call, constrain it to the request's tool schemas")
    swa_eviction_interval: int = Field(128, ge=1, description="decode steps between window slides")
    ngram_draft_tokens: int = Field(0, ge=0, le=64, description="prompt-lookup speculation: after each decode token, feed up to this many tokens guessed from what followed the sequence's last tokens earlier, and keep those the model's own samples agree with (the same tokens, more per step when the text repeats itself; 0: off)")
    ngram_draft_max_batch: int = Field(2, ge=1, description="speculate only while at most this many sequences run: a larger batch is no longer bound by streaming the weights, so its drafts cost time (python -m bench.ngram_speculation, Qwen3-0.6B shape, 4 drafts each: 0.89-0.92x a plain step's time alone, 1.08-1.18x at 2 sequences, 1.51-1.82x at 4, against 1.6 tokens a step on agent text)")

    reasoning_budget: int = Field(-1, description="server default thinking budget in tokens (-1 unrestricted, 0 none)")
    reasoning_budget_message: str | None = Field(None, description="text forced before the closing tag when a budget runs out (or tool_choice closes a thought)")

    parallel: int = Field(4, ge=1, le=256, description="logical slots (llama.cpp --parallel)")
    slot_save_path: Path | None = Field(None, description="directory for .fslot files; enables slot save/restore/erase")
    max_slot_file_bytes: int = Field(64 * 2**30, ge=1, description="largest .fslot file restore will read")
    responses_store_size: int = Field(256, ge=0, description="Responses API turns kept in memory for previous_response_id and GET /v1/responses/{id}, least recently used evicted (0: none)")
    responses_store_mib: int = Field(512, ge=1, description="estimated MiB the stored Responses API turns may hold (each counted with its request body and output, shared conversation items once), least recently used evicted; the newest turn always stays")
    max_request_body_bytes: int = Field(32 * 2**20, ge=1024, description="largest request body accepted (413 above it)")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="log level")

    @field_validator("reasoning_budget")
    @classmethod
    def _budget_range(cls, v: int) -> int:
        if not -1 <= v <= 2**31 - 1:
            raise ValueError(f"--reasoning-budget must be between -1 <= value <= 2147483647, but got {v}")
        return v

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources = [init_settings, env_settings]
        path = _CONFIG_FILE.get() or os.environ.get("ANCHORAGE_CONFIG")
        if path:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(path)))
        return tuple(sources)


DEMO_CONFIG = Path(str(resources.files("configs") / "demo.toml"))


class _ConfigFile:
    """The --config path seen before parsing (the source list is built before flags are read)."""

    value: str | None = None

    def get(self) -> str | None:
        return self.value


_CONFIG_FILE = _ConfigFile()


def parse_serve_args(argv: list[str]) -> ServeSettings:
    """Flags -> settings. Raises pydantic/SettingsError on a bad value."""
    _CONFIG_FILE.value = None
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            _CONFIG_FILE.value = argv[i + 1]
        elif arg.startswith("--config="):
            _CONFIG_FILE.value = arg.split("=", 1)[1]
    if _CONFIG_FILE.value and not Path(_CONFIG_FILE.value).is_file():
        raise FileNotFoundError(f"--config {_CONFIG_FILE.value}: no such file")
    settings = CliApp.run(ServeSettings, cli_args=argv)
    if settings.model is None and settings.config is None and not os.environ.get("ANCHORAGE_CONFIG"):
        # The built-in demo model comes with its own defaults (configs/demo.toml).
        _CONFIG_FILE.value = str(DEMO_CONFIG)
        settings = CliApp.run(ServeSettings, cli_args=argv)
        _CONFIG_FILE.value = None
    return settings
