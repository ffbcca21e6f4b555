"""``rlark jobs``: write, check, submit and watch training jobs.

A job is one YAML document (``rlark jobs init`` writes a starter from a template). ``preview`` shows
what the server would do with it — the normalised YAML, every problem with its field and line, and
the workers each cluster's agent will create — without submitting. ``submit --follow`` then shows
the job's progress (queued → placed → Ray nodes joined i/N → running → exit code) and exits with
the job's outcome.

Exit codes: 0 ok (for ``submit --follow``: the job succeeded); 1 the server refused the request or
the document has errors; 3 not logged in; 4 the gateway is unreachable; 5 the job ended without
success (Failed, Cancelled or Lost).
"""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rlark_contracts.relay import SERVICE_RAY_DASHBOARD, SERVICE_TENSORBOARD
from rlark_contracts.workers import MARKER_PREFIX

from rlark_cli import lang
from rlark_cli.client import EXIT_REFUSED, Gateway, RetryPolicy, err, fail
from rlark_cli.commands import job_files, job_usage
from rlark_cli.output import Column, Format, OutputOpt, emit, print_table, print_text
from rlark_cli.template_params import ParamError, params_from

EXIT_JOB_FAILED = 5

app = typer.Typer(help="Training jobs: write, check, submit, watch, cancel.", no_args_is_help=True)

JobId = Annotated[str, typer.Argument(metavar="JOB", help="The job's id (job-...)")]
JobFile = Annotated[
    str, typer.Argument(metavar="FILE", help="The job document (YAML or JSON); '-' reads standard input")
]
FollowOpt = Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming until the job ends")]

COLUMNS: list[Column] = [
    ("ID", "id"),
    ("NAME", "name"),
    ("STATUS", "status"),
    ("WORKERS", "worker_count"),
    ("GPUS", "gpu_count"),
    ("CLUSTERS", "clusters"),
    ("OWNER", "owner"),
    ("CREATED", lambda job: str(job["created_at"])[:19].replace("T", " ")),
    ("REASON", lambda job: _short(lang.reason_of(job), 60)),
]


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _read(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    file = Path(path)
    if not file.is_file():
        fail(f"no such file: {path}")
    return file.read_bytes()


def _document_headers(content: bytes) -> dict[str, str]:
    kind = "application/json" if content.lstrip().startswith(b"{") else "application/yaml"
    return {"Content-Type": kind}


def _problem_lines(problems: list[dict[str, Any]], label: str, style: str) -> None:
    """One line a problem, in the CLI's language: its field (and line), then the sentence — which most
    often starts with the field itself (``spec.tasks[0].image: ...``), said once."""
    for problem in problems:
        field = problem.get("field") or ""
        said = lang.say(problem)
        for colon in (":", "："):  # the catalogue's English and Chinese
            if field and said.startswith(field + colon):
                said = said[len(field) + 1 :].lstrip()
                break
        where = field or "document"
        if problem.get("line"):
            where += f" (line {problem['line']})"
        print_text((label, f"bold {style}"), f" {where}: {said} ", (f"({problem['code']})", "dim"))


# -------------------------------------------------------------------------------------------- templates


@app.command("templates")
def templates(output: OutputOpt = Format.table) -> None:
    """List the job templates `rlark jobs init` can start from."""
    result = Gateway().get("/api/v1/templates")
    if output is not Format.table:
        emit(result, output)
        return
    rows = []
    for item in result["items"]:
        schema = item.get("params_schema") or {}
        required = set(schema.get("required") or [])
        params = ", ".join(f"{p}{'*' if p in required else ''}" for p in (schema.get("properties") or {}))
        rows.append((item["id"], item["title_en"], params, item["description_en"]))
    print_table(("TEMPLATE", "TITLE", "PARAMETERS", "DESCRIPTION"), rows)
    print_text(("* required; use: rlark jobs init --template NAME --param key=value ...", "dim"))


@app.command("init")
def init(
    template: Annotated[
        str, typer.Option("--template", "-t", help="Template id (see: rlark jobs templates)")
    ],
    params: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            "-p",
            help="Template parameter as key=value (repeatable), e.g. cluster=gpu-a; "
            "lists as a,b (sshKeys=laptop,desk) or JSON, mappings as k=v,k2=v2 or JSON",
        ),
    ] = None,
    file: Annotated[str, typer.Option("--file", help="Where to write the YAML ('-' prints it)")] = "job.yaml",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file")] = False,
) -> None:
    """Write a starter job document from a template (edit it, then preview and submit it).

    Without --param the template's example is written, with placeholder cluster and image names.
    """
    gateway = Gateway()
    found = {t["id"]: t for t in gateway.get("/api/v1/templates")["items"]}
    if template not in found:
        fail(f"no template named {template!r}; choose one of: {', '.join(found)}")
    if params:
        try:
            values = params_from(params, found[template].get("params_schema") or {})
        except ParamError as exc:
            fail(str(exc))
        text = gateway.post(f"/api/v1/templates/{template}:render", json={"params": values})["yaml"]
    else:
        text = found[template]["example_yaml"]
    if file == "-":
        typer.echo(text, nl=False)
        return
    target = Path(file)
    if target.exists() and not force:
        fail(f"{file} exists; use --force to overwrite it")
    target.write_text(text)
    print_text(f"wrote {file}; check it with: rlark jobs preview {file}")


# ---------------------------------------------------------------------------------- preview and submit


@app.command("preview")
def preview(
    path: JobFile,
    show_yaml: Annotated[bool, typer.Option("--yaml", help="Also print the normalised YAML")] = False,
    output: OutputOpt = Format.table,
) -> None:
    """Check a job document without submitting it: problems, warnings and the per-cluster plan.

    Exits 1 when the document has errors.
    """
    content = _read(path)
    result = Gateway().post("/api/v1/jobs:preview", content=content, headers=_document_headers(content))
    if output is not Format.table:
        emit(result, output)
    else:
        _problem_lines(result["errors"], "error", "red")
        _problem_lines(result["warnings"], "warning", "yellow")
        if result["plan"]:
            rows = []
            for plan in result["plan"]:
                state = "" if plan["online"] else (" (offline)" if plan["known"] else " (unknown)")
                for worker in plan["workers"]:
                    role = worker["role"] + (" (Header)" if worker["is_header"] else "")
                    rows.append(
                        (
                            plan["cluster"] + state,
                            role,
                            str(worker["index"]),
                            str(worker["rank"]),
                            str(worker["gpus"]),
                            worker["image"],
                        )
                    )
            print_table(
                ("CLUSTER", "ROLE", "WORKER", "RANK", "GPUS", "IMAGE"),
                rows,
                title="what each cluster's agent will create",
            )
        # Where the scheduler would place it now and why, or why it would wait (ADR 0026).
        layout, pending = result.get("layout"), result.get("pending")
        if layout:
            print_text((lang.own("placement"), "bold"), " ", lang.say_all(layout["parts"], layout["message"]))
        elif pending:
            said = lang.say_all(pending["parts"], pending["message"])
            print_text((lang.own("would_wait"), "bold yellow"), " ", said)
        if show_yaml and result["yaml"]:
            typer.echo(result["yaml"], nl=False)
        if not result["errors"]:
            print_text(("ok", "bold green"), ": the job can be submitted")
    if result["errors"]:
        raise typer.Exit(EXIT_REFUSED)


@app.command("submit")
def submit(
    path: JobFile,
    follow: FollowOpt = False,
    output: OutputOpt = Format.table,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            help="Key that makes the submission safe to repeat (default: a new random one). Running the "
            "command again with the same key and file returns the job already created instead of a second one",
        ),
    ] = None,
    retries: Annotated[
        int,
        typer.Option(
            "--retries",
            min=0,
            max=20,
            help="Retries (same key) when the gateway is unreachable or answers 502/503/504",
        ),
    ] = 5,
) -> None:
    """Submit a job. With --follow, show its progress until it ends and exit with its outcome.

    The request carries an Idempotency-Key and is retried with it when the connection fails or a
    service is restarting, so a retry never creates a second job.
    """
    content = _read(path)
    gateway = Gateway()
    key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())
    job = gateway.post_idempotent(
        "/api/v1/jobs",
        key,
        policy=RetryPolicy(attempts=retries + 1),
        content=content,
        headers=_document_headers(content),
    )
    if output is not Format.table:
        emit(job, output)
    else:
        print_text("submitted ", (job["id"], "bold"), f" ({job['name']}): {job['status']}")
        _problem_lines(job.get("warnings") or [], "warning", "yellow")
    if follow:
        _follow_progress(gateway, job["id"], quiet=output is not Format.table)


def _follow_progress(gateway: Gateway, job_id: str, *, quiet: bool) -> None:
    final: dict[str, Any] = {}
    last = None
    for event, data in _sse(gateway, f"/api/v1/jobs/{job_id}/events", {"follow": "true"}):
        if event == "end":
            final = data
            break
        line = _progress_line(event, data)
        # Every worker reports the same count once all have joined: say it once.
        if line and line != last and not quiet:
            print_text(line)
            last = line
    status = final.get("status") or gateway.get(f"/api/v1/jobs/{job_id}")["status"]
    code = final.get("exit_code")
    suffix = f" (exit code {code})" if code is not None else ""
    if status == "Succeeded":
        print_text((status, "bold green"), suffix)
        return
    print_text((status, "bold red"), f"{suffix}: {final.get('reason', '')}", console=err)
    raise typer.Exit(EXIT_JOB_FAILED)


def _progress_line(kind: str, event: dict[str, Any]) -> str | None:
    """One human line per interesting timeline event (queued → placed → joined i/N → running → end)."""
    reason = lang.event_text(event)
    if kind == "pending":
        return f"queued: {reason}"
    if kind == "status":
        to = event.get("to_status")
        if to == "Pending":
            return f"queued ({reason})" if reason and event.get("reason") != "submitted" else "queued"
        if to == "Scheduled":
            return f"placed: {reason}"
        if to == "Starting":
            return f"starting: {reason}"
        if to == "Running":
            return f"running: {reason}"
        return None  # the end is printed from the final event
    if kind == "worker":
        details = event.get("details") or {}
        joined, expected = details.get("ray_nodes_joined"), details.get("ray_nodes_expected")
        if joined is not None and expected:
            return f"Ray nodes joined {joined}/{expected}"
        if event.get("phase") == "Failed":
            return f"worker {event.get('worker_id')} failed: {reason}"
    return None


def _sse(gateway: Gateway, path: str, params: dict[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(event, data)`` pairs of a server-sent events stream (data decoded from JSON)."""
    response = gateway.stream(path, params=params, timeout=None)
    try:
        event, data = "message", ""
        for line in response.iter_lines():
            if not line:
                if data:
                    try:
                        decoded = json.loads(data)
                    except ValueError:
                        decoded = {"text": data}
                    yield event, decoded
                event, data = "message", ""
            elif line.startswith(":"):
                continue
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].lstrip()
    finally:
        response.close()


# --------------------------------------------------------------------------------------------- reading


@app.command("list")
def list_jobs(
    status: Annotated[
        str | None, typer.Option("--status", help="Status filter, e.g. Running,Pending")
    ] = None,
    query: Annotated[str | None, typer.Option("--query", "-q", help="Part of the name or id")] = None,
    owner: Annotated[str | None, typer.Option("--owner", help="Admins: one user's jobs")] = None,
    page: Annotated[int, typer.Option("--page", min=1)] = 1,
    page_size: Annotated[int, typer.Option("--page-size", min=1, max=500)] = 50,
    output: OutputOpt = Format.table,
) -> None:
    """List your jobs, newest first (admins: everyone's)."""
    params: dict[str, Any] = {"page": page, "page_size": page_size}
    for key, value in (("status", status), ("q", query), ("owner", owner)):
        if value:
            params[key] = value
    emit(Gateway().get("/api/v1/jobs", params=params), output, COLUMNS)


@app.command("show")
def show(job_id: JobId, output: OutputOpt = Format.table) -> None:
    """Show a job: status and reason, why it waits, its workers, timeline and outputs."""
    job = Gateway().get(f"/api/v1/jobs/{job_id}")
    if output is not Format.table:
        emit(job, output)
        return
    print_text((job["id"], "bold"), f"  {job['name']}  owner {job['owner']}")
    code = "" if job.get("exit_code") is None else f" (exit code {job['exit_code']})"
    print_text("status     ", (job["status"], "bold"), f"{code}: {lang.reason_of(job)}")
    if job.get("network_domain"):
        print_text(f"domain     {job['network_domain']}")
    policy = (job.get("spec") or {}).get("spec", {}).get("restartPolicy")
    if policy is not None or job.get("attempt", 1) > 1:
        most = (policy or {}).get("maxRestarts", 0)
        print_text(f"attempt    {job.get('attempt', 1)} ({job.get('restarts', 0)} of {most} restarts used)")
    if job.get("ray_nodes"):
        print_text(f"ray nodes  {job['ray_nodes']['joined']}/{job['ray_nodes']['expected']} joined")
    if job.get("ssh_command"):
        # Through the platform (ADR 0010): the workers' own addresses are not reachable from here.
        print_text(f"ssh        rlark ssh {job['id']}   (every worker: rlark ssh-config {job['id']})")
    if job.get("tensorboard_dir"):
        print_text(f"tensorboard {job['tensorboard_dir']}")
    rows: list[tuple[str, ...]]
    pending = job.get("pending")
    if pending:
        rows = [
            (
                role["role"],
                role["cluster"] + ("" if role["cluster_online"] else " (offline)"),
                f"{role['needed']} × {role['gpus_per_worker']} GPUs",
                str(role["matching"]),
                str(role["ready"]),
                str(role["schedulable"]),
                str(role["enough"]),
            )
            for role in pending["roles"]
        ]
        headers = ("ROLE", "CLUSTER", "NEEDS", "MATCH", "READY", "SCHEDULABLE", "ENOUGH GPUS")
        print_table(headers, rows, title="why it waits")
    if job["workers"]:
        print_table(WORKER_HEADERS, [_worker_row(job["id"], w) for w in job["workers"]], title="workers")
    attempts = job.get("attempts") or []
    if len(attempts) > 1:
        rows = [
            (
                str(attempt["number"]),
                str(attempt["started_at"])[:19].replace("T", " "),
                str(attempt["ended_at"] or "-")[:19].replace("T", " "),
                lang.reason_of(attempt) or "-",
            )
            for attempt in attempts
        ]
        print_table(("ATTEMPT", "STARTED", "ENDED", "REASON"), rows, title="attempts")
    rows = [
        (str(event["at"])[:19].replace("T", " "), event["to_status"], lang.event_text(event))
        for event in job["timeline"]
    ]
    print_table(("AT", "STATUS", "REASON"), rows, title="timeline")
    for listing in job.get("outputs") or []:
        more = " (truncated)" if listing["truncated"] else ""
        print_text(f"outputs of {listing['worker_id']}{more}:")
        for file in listing["files"]:
            print_text(f"  {file['path']}  {file['size']} bytes")


WORKER_HEADERS = ("WORKER", "RANK", "NODE", "ADDRESS", "GPUS", "PHASE", "RAY", "EXIT", "REASON")


def _worker_row(job_id: str, worker: dict[str, Any]) -> tuple[str, ...]:
    """A worker as ``jobs show`` lists it: role-index (the job's id is printed above), its cluster/node (as the
    console shows it), and why it is in its phase — a Stopped worker says who stopped it and why."""
    return (
        worker["id"].removeprefix(f"{job_id}-"),
        str(worker["rank"]),
        f"{worker['cluster']}/{worker['node']}" if worker["node"] else worker["cluster"],
        worker["address"] or "-",
        str(worker["gpus"]),
        worker["phase"],
        "joined" if worker["ray_joined"] else "-",
        _exit_text(worker["exit_code"]),
        lang.reason_of(worker) or "-",
    )


@app.command("outputs")
def outputs(job_id: JobId, output: OutputOpt = Format.table) -> None:
    """List the files in a job's outputs (path, size, time, worker), from the workers' cluster agents."""
    job_files.outputs(job_id, output)


@app.command("top")
def top(
    job_id: JobId,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Redraw until Ctrl-C")] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=1.0, max=3600.0, help="Seconds between redraws with --watch")
    ] = 5.0,
    output: OutputOpt = Format.table,
) -> None:
    """Show what each worker uses now: CPU cores, memory, GPU utilization and GPU memory (the latest sample
    of the last 5 minutes), and the job's "idle GPUs" warning if it stands."""
    job_usage.top(job_id, watch=watch, interval_s=interval, output=output)


@app.command("download")
def download(
    job_id: JobId,
    path: Annotated[str, typer.Argument(metavar="PATH", help="A file or directory in the job's outputs")],
    worker: job_files.WorkerOpt = None,
    output_dir: job_files.DirOpt = Path("."),
) -> None:
    """Download a file of a job's outputs, or a directory as a .tar, through the gateway."""
    saved = job_files.download(job_id, path, worker, output_dir)
    print_text(f"saved {saved}")


@app.command("tensorboard")
def tensorboard(job_id: JobId) -> None:
    """Print the URL that opens the job's TensorBoard in a browser logged in to the console (served on the
    gateway's tools origin; started on demand by its agent)."""
    job = Gateway().get(f"/api/v1/jobs/{job_id}")
    if not job.get("tensorboard_dir"):
        fail(
            lang.say(
                {"message_key": "no_tensorboard", "params": {"job": job_id}},
                f"job {job_id} declares no tensorboardDir",
            )
        )
    typer.echo(job_files.tool_url(Gateway().url, job_id, SERVICE_TENSORBOARD))


@app.command("dashboard")
def dashboard(job_id: JobId) -> None:
    """Print the URL that opens the Ray dashboard of the job's Header in a browser logged in to the console
    (served on the gateway's tools origin, while the job runs)."""
    job = Gateway().get(f"/api/v1/jobs/{job_id}")
    status = str(job.get("status"))
    if status != "Running":
        params = {"job": job_id, "status": status, "tool": "Ray dashboard"}
        english = f"job {job_id} is {status}: its Ray dashboard is served only while it runs"
        fail(lang.say({"message_key": "tool_job_not_running", "params": params}, english))
    typer.echo(job_files.tool_url(Gateway().url, job_id, SERVICE_RAY_DASHBOARD))


@app.command("cancel")
def cancel(job_id: JobId, output: OutputOpt = Format.table) -> None:
    """Cancel a job: its workers are stopped and its GPUs and addresses released."""
    job = Gateway().post(f"/api/v1/jobs/{job_id}:cancel")
    if output is not Format.table:
        emit(job, output)
        return
    print_text(f"{job['id']}: {job['status']} ({job['reason']})")


@app.command("requeue")
def requeue(job_id: JobId, output: OutputOpt = Format.table) -> None:
    """Stop a running job's attempt on purpose and queue its next one: the Header's run script gets SIGTERM
    and spec.terminationGracePeriodSeconds to save a checkpoint; the next attempt resumes per spec.resume.
    Uses up no restart of the job's restartPolicy."""
    job = Gateway().post(f"/api/v1/jobs/{job_id}:requeue")
    if output is not Format.table:
        emit(job, output)
        return
    print_text(f"{job['id']}: {job['status']}, attempt {job['attempt']} ({job['reason']})")


@app.command("set-keys")
def set_keys(
    job_id: JobId,
    names: Annotated[list[str], typer.Argument(metavar="KEY...", help="Names of your SSH keys")],
) -> None:
    """Replace the SSH keys of a job; running workers get them without a restart."""
    job = Gateway().put(f"/api/v1/jobs/{job_id}/ssh-keys", json={"ssh_keys": names})
    print_text(f"{job['id']}: SSH keys now {', '.join(job['ssh_keys']) or 'none'}")


@app.command("logs")
def logs(
    job_id: JobId,
    follow: FollowOpt = False,
    worker: Annotated[
        str | None,
        typer.Option(
            "--worker", "-w", help="Only this worker's lines: its id, or role-index as `jobs show` lists it"
        ),
    ] = None,
    attempt: Annotated[
        int | None,
        typer.Option("--attempt", "-a", min=1, help="The lines of this attempt (default: the current one)"),
    ] = None,
    since_seq: Annotated[int | None, typer.Option("--since-seq", help="Lines after this line number")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10000)] = 1000,
    markers: Annotated[
        bool,
        typer.Option(
            "--markers",
            help="Also print the worker bootstrap's `##rlark {...}` lines, which the platform reads",
        ),
    ] = False,
) -> None:
    """Print a job's output lines (kept after the workers are gone, per attempt); -f follows new ones."""
    gateway = Gateway()
    params: dict[str, Any] = {}
    if attempt is not None:
        params["attempt"] = attempt
    if worker:
        params["worker"] = worker if worker.startswith(f"{job_id}-") else f"{job_id}-{worker}"
    if since_seq is not None:
        params["since_seq"] = since_seq
    if follow:
        lines = (
            line
            for event, line in _sse(gateway, f"/api/v1/jobs/{job_id}/logs", {**params, "follow": "true"})
            if event == "log"
        )
    else:
        text = gateway.get(f"/api/v1/jobs/{job_id}/logs", params={**params, "limit": limit})
        lines = (json.loads(raw) for raw in (text or "").splitlines())
    for line in lines:
        if markers or not str(line["line"]).startswith(MARKER_PREFIX):
            typer.echo(_log_text(line, prefix=worker is None))


_SIGNAL_NAMES = {sig.value: sig.name for sig in signal.Signals}


def _exit_text(code: int | None) -> str:
    """An exit code, with the signal named when it is 128 + N: a worker the platform stopped when its job
    ended shows ``143 (SIGTERM)``."""
    if code is None:
        return "-"
    name = _SIGNAL_NAMES.get(code - 128)
    return f"{code} ({name})" if name else str(code)


def _log_text(line: dict[str, Any], *, prefix: bool) -> str:
    return f"[{line['worker_id']}] {line['line']}" if prefix else str(line["line"])


@app.command("events")
def events(job_id: JobId, follow: FollowOpt = False, output: OutputOpt = Format.table) -> None:
    """Print a job's timeline: status changes, worker phases and pending reasons; -f follows it."""
    gateway = Gateway()
    if follow:
        for kind, event in _sse(gateway, f"/api/v1/jobs/{job_id}/events", {"follow": "true"}):
            if output is not Format.table:
                typer.echo(json.dumps({"event": kind, **event}))
            elif kind == "end":
                print_text(f"ended: {event.get('status')} {event.get('reason', '')}")
            else:
                print_text(_event_text(kind, event))
        return
    result = gateway.get(f"/api/v1/jobs/{job_id}/events")
    columns: list[Column] = [
        ("AT", lambda e: str(e["at"])[:19].replace("T", " ")),
        ("KIND", "kind"),
        ("WHAT", lambda e: e["to_status"] or e.get("phase") or ""),
        ("WORKER", "worker_id"),
        ("REASON", lang.event_text),
    ]
    emit(result, output, columns)


def _event_text(kind: str, event: dict[str, Any]) -> str:
    at = str(event.get("at", ""))[:19].replace("T", " ")
    if kind == "status":
        return f"{at}  {event.get('from_status') or '-'} → {event.get('to_status')}: {lang.event_text(event)}"
    if kind == "worker":
        return (
            f"{at}  worker {event.get('worker_id')}: {event.get('phase')} {lang.event_text(event)}".rstrip()
        )
    return f"{at}  {kind}: {lang.event_text(event)}"
