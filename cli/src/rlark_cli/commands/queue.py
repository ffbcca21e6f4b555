"""``rlark queue``: the waiting jobs in the order rounds try them, and for one of yours where it stands, when
it may start and what would make it fit now (issue 20 item 4). Others' jobs show as "(another user's job)"."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rlark_cli.client import Gateway
from rlark_cli.output import Column, Format, OutputOpt, emit, print_text

HIDDEN = "(another user's job)"


def _who(item: dict[str, Any]) -> str:
    return f"{item['name']} ({item['job_id']})" if item.get("job_id") else HIDDEN


COLUMNS: list[Column] = [
    ("#", "position"),
    ("JOB", _who),
    ("PROJECT", lambda item: item.get("project") or "-"),
    ("PRIORITY", "priority"),
    ("GPUS", "gpus"),
    ("CLUSTERS", lambda item: ", ".join(item["clusters"])),
    ("AHEAD", "ahead"),
    ("WAITS FOR", "waits_for"),
    ("SINCE", lambda item: str(item["waiting_since"])[:16].replace("T", " ")),
]


def register(app: typer.Typer) -> None:
    @app.command("queue")
    def queue(
        job_id: Annotated[
            str | None,
            typer.Argument(metavar="[JOB]", help="One of your waiting jobs: explain where it stands"),
        ] = None,
        mine: Annotated[
            bool, typer.Option("--mine", help="Only your jobs (positions stay those of the queue)")
        ] = False,
        limit: Annotated[
            int, typer.Option("--limit", min=1, max=1000, help="Show at most this many jobs")
        ] = 200,
        output: OutputOpt = Format.table,
    ) -> None:
        """The waiting jobs in the order rounds try them; with JOB: jobs ahead, estimated start, hints."""
        gateway = Gateway()
        if job_id is None:
            page = gateway.get("/api/v1/queue", params={"mine": str(mine).lower(), "limit": limit})
            if output is not Format.table:
                emit(page, output)
                return
            emit(page["items"], output, COLUMNS)
            print_text(f"{page['total']} job(s) waiting")
            return
        detail = gateway.get(f"/api/v1/queue/{job_id}")
        if output is not Format.table:
            emit(detail, output)
            return
        job = detail["job"]
        print_text((_who(job), "bold"), f"  position {job['position']}, waits for {job['waits_for']}")
        if job.get("reason"):
            print_text(f"why        {job['reason']}")
        start = detail["estimated_start"]
        print_text(f"starts     {str(start)[:16].replace('T', ' ') + ' (estimate)' if start else 'unknown'}")
        print_text(f"           {detail['estimate_basis']}")
        for hint in detail["hints"]:
            print_text(f"fits now?  {hint['message']}")
        if detail["jobs_ahead"]:
            print_text(f"ahead ({len(detail['jobs_ahead'])}):")
            emit(detail["jobs_ahead"], output, COLUMNS)
