"""The `anchorage` command: `serve` and `tiny-checkpoint`.

`anchorage serve` parses ServeSettings (flags, ANCHORAGE_* env, --config),
refuses a bad model folder before binding a port (no config.json, an
unsupported architecture: cheap checks with clear messages), then runs uvicorn
on the app factory. The model itself loads in the background -- /health says
503 until it is ready -- and if loading fails the server exits non-zero with
the reason. Ctrl-C / SIGTERM shut down gracefully: uvicorn stops accepting,
the engine thread stops and fails what was in flight.
"""

from __future__ import annotations

import logging
import sys

USAGE = """usage: anchorage <command> [options]

commands:
  serve            run the OpenAI-compatible server (anchorage serve --help)
  tiny-checkpoint  write a small random Hugging Face checkpoint (anchorage tiny-checkpoint --help)
"""


def serve(argv: list[str]) -> int:
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from models.config import CheckpointError, read_architecture
    from server.runtime import demo_model_dir
    from server.settings import parse_serve_args

    try:
        settings = parse_serve_args(argv)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except (ValidationError, SettingsError, FileNotFoundError) as exc:
        print(f"anchorage serve: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    model_dir = settings.model or demo_model_dir()
    try:
        read_architecture(model_dir)
    except CheckpointError as exc:
        print(f"anchorage serve: {exc}", file=sys.stderr)
        return 2

    import uvicorn

    from server.app import create_app

    failed: list[BaseException] = []
    server_box: list[uvicorn.Server] = []

    def on_failure(exc: BaseException) -> None:
        failed.append(exc)
        if server_box:
            server_box[0].should_exit = True

    app = create_app(settings, on_load_failure=on_failure)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                            timeout_graceful_shutdown=10)
    server = uvicorn.Server(config)
    server_box.append(server)
    server.run()
    if failed:
        print(f"anchorage serve: the model failed to load: {failed[0]}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "serve":
        return serve(rest)
    if command == "tiny-checkpoint":
        from models.tiny_checkpoint import main as tiny_main

        return tiny_main(rest)
    print(f"anchorage: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
