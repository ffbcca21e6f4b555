"""``rlark jobs outputs`` and ``rlark jobs download``: a job's output files from the worker's agent, through
the gateway (issue 15.3, ADR 0010); ``rlark jobs tensorboard`` and ``rlark jobs dashboard``'s URLs (issue 15.4, ADR 0012).

``download`` streams to ``<DIR>/<name>.part`` with a progress bar and renames it when every byte arrived
(a file's length is checked against ``Content-Length``); a directory arrives as ``<name>.tar``. Without
``--worker`` the listing says which worker holds the path.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, unquote

import httpx
import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rlark_contracts.relay import TOOL_OPEN_PATH

from rlark_cli.client import EXIT_UNAVAILABLE, Gateway, err, fail
from rlark_cli.output import Column, Format, emit, print_text

COLUMNS: list[Column] = [
    ("WORKER", "worker"),
    ("PATH", "path"),
    ("SIZE", "size"),
    ("MODIFIED", lambda f: "-" if f.get("mtime") is None else _time(float(f["mtime"]))),
]


def _time(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def tool_url(gateway_url: str, job_id: str, tool: str) -> str:
    """Where the gateway opens a job's tool (``tensorboard``, ``ray-dashboard``): a browser logged in to the
    console follows it to the tools origin with a one-time ticket (ADR 0012)."""
    return gateway_url.rstrip("/") + TOOL_OPEN_PATH.format(job_id=quote(job_id, safe=""), tool=tool)


def outputs(job_id: str, output: Format) -> None:
    listing = Gateway().get(f"/api/v1/jobs/{job_id}/outputs")
    if output is not Format.table:
        emit(listing, output)
        return
    emit(listing["files"], output, COLUMNS, title=f"outputs of {job_id}")
    for worker in listing["workers"]:
        if worker["source"] != "agent":
            note = "from its output manifest" if worker["source"] == "manifest" else "unavailable"
            print_text(
                f"{worker['worker']}: {note} ({worker.get('reason') or 'no reason given'})", console=err
            )
        if worker["truncated"]:
            print_text(f"{worker['worker']}: the listing is truncated", console=err)


def holders(listing: dict[str, Any], path: str) -> list[str]:
    """The workers whose outputs hold ``path`` (a file, or a directory above files)."""
    wanted = path.rstrip("/")
    found = {
        f["worker"]
        for f in listing.get("files") or []
        if f["path"] == wanted or str(f["path"]).startswith(wanted + "/")
    }
    return sorted(found)


def filename_of(disposition: str, fallback: str) -> str:
    """The file name a ``Content-Disposition`` names (``filename*`` first), reduced to one path component."""
    match = re.search(r"filename\*=UTF-8''([^;]+)", disposition) or re.search(
        r'filename="([^"]*)"', disposition
    )
    name = unquote(match.group(1)) if match else fallback
    name = os.path.basename(name.replace("\\", "/"))
    return name if name not in ("", ".", "..") else fallback


def download(job_id: str, path: str, worker: str | None, out_dir: Path) -> Path:
    gateway = Gateway(timeout=60.0)
    if worker is None:
        found = holders(gateway.get(f"/api/v1/jobs/{job_id}/outputs"), path)
        if len(found) > 1:
            fail(f"{path} is in the outputs of several workers ({', '.join(found)}): pass --worker")
        worker = found[0] if found else None
    params = {"path": path, **({"worker": worker} if worker else {})}
    response = gateway.stream(f"/api/v1/jobs/{job_id}/outputs/download", params=params)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / filename_of(response.headers.get("content-disposition", ""), "download")
    partial = target.with_name(target.name + ".part")
    expected = response.headers.get("content-length")
    total = int(expected) if expected is not None else None
    received = 0
    try:
        with (
            partial.open("wb") as sink,
            Progress(
                TextColumn("{task.description}", style="progress.description", markup=False),  # a file's name
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=err,
                transient=True,
            ) as progress,
        ):
            task = progress.add_task(target.name, total=total)
            for chunk in response.iter_bytes():
                sink.write(chunk)
                received += len(chunk)
                progress.update(task, advance=len(chunk))
    except httpx.HTTPError as exc:
        partial.unlink(missing_ok=True)
        fail(f"the download broke after {received} bytes: {exc}", EXIT_UNAVAILABLE)
    finally:
        response.close()
    if total is not None and received != total:
        partial.unlink(missing_ok=True)
        fail(f"the download ended after {received} of {total} bytes", EXIT_UNAVAILABLE)
    partial.replace(target)
    return target


WorkerOpt = Annotated[
    str | None,
    typer.Option("--worker", "-w", help="Worker id or ROLE-INDEX (found from the listing if omitted)"),
]
DirOpt = Annotated[Path, typer.Option("--output-dir", "-o", help="Directory to save into")]
