"""The README stays true: every flag is documented, the shipped config parses."""

from __future__ import annotations

from pathlib import Path

from server.settings import ServeSettings, parse_serve_args

ROOT = Path(__file__).resolve().parent.parent


def test_every_serve_flag_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for name in ServeSettings.model_fields:
        flag = "--" + name.replace("_", "-")
        assert f"`{flag}" in readme, f"{flag} is not documented in README.md"


def test_the_readme_shows_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make serve" in readme and "make test" in readme


def test_the_shipped_server_config_parses_and_flags_override_it():
    settings = parse_serve_args(["--config", str(ROOT / "configs" / "server.toml"), "--port", "9001"])
    assert settings.port == 9001
    assert settings.page_size == 16 and settings.anchors is True


def test_serving_the_demo_model_takes_the_demo_defaults_and_flags_still_win():
    settings = parse_serve_args(["--port", "9002"])
    assert settings.model is None and settings.served_model_name == "anchorage-demo"
    assert (settings.swa_eviction_interval, settings.page_size, settings.port) == (2, 4, 9002)
    assert parse_serve_args(["--swa-eviction-interval", "32"]).swa_eviction_interval == 32


def test_a_local_model_does_not_take_the_demo_defaults(tmp_path):
    settings = parse_serve_args(["--model", str(tmp_path)])
    assert settings.served_model_name is None and settings.swa_eviction_interval == 128
