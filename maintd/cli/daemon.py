"""``maintd daemon``: maintain every table of the warehouse until SIGTERM (the container's command)."""

from __future__ import annotations

from pathlib import Path

import typer

from maintd.cli._output import user_errors


def register(app: typer.Typer) -> None:
    """Add ``maintd daemon`` to the root app."""
    app.command("daemon")(daemon_command)


def daemon_command(
    config: Path | None = typer.Option(
        None, "--config", help="Settings YAML (default: $MAINTD_CONFIG, then config/maintd.yaml)."
    ),
) -> None:
    """Maintain every table until SIGTERM (then drain and exit 0); serves /healthz, /readyz and /metrics."""
    from maintd.cli._output import load_cli_settings
    from maintd.service.logging import configure_logging
    from maintd.service.runtime import serve

    with user_errors():
        settings = load_cli_settings(config)
        configure_logging(settings.logging, own_stderr=True)
        code = serve(settings)
    raise typer.Exit(code)
