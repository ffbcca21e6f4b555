"""``make run``: the whole platform on this machine, a local cluster with its agent, and a first job on it.

``python -m rlark_devinfra.demo`` does, each step idempotent (a second run reuses what runs and what exists):

1. builds the web console when npm is there (cached by source hash; the API works without it);
2. starts PostgreSQL, Kafka and every service (``rlark_devinfra.stack.up``);
3. creates the first admin ``admin`` with a random password kept in ``.state/admin-password`` (mode 600)
   and printed once, when it is made;
4. logs the ``rlark`` CLI in for this checkout: ``.state/cli/config.json`` (use it with
   ``RLARK_CONFIG_DIR=.state/cli``), so a user's own CLI configuration is left alone;
5. registers the cluster ``local`` from ``deploy/local-cluster.example.yaml``; its agent credential is
   kept in ``.state/agent-credential`` (mode 600), rotated when that file is missing;
6. starts the cluster's tunnel-agent (``python -m rlark_tunnel_agent all``, state in ``.state/agent``);
   the local runtime puts each worker in its own network namespace when run as root;
7. adds the SSH key ``demo`` (generated into ``.state/demo-key`` when absent);
8. submits ``examples/ray-cpu-training.yaml`` — with its output volume pointed at ``.state/demo/outputs`` —
   and follows it with ``rlark jobs submit --follow`` to its end; a demo job that already succeeded is not
   submitted again;
9. prints where the console, logs and outputs are.

Secrets (the admin password once, at creation) are printed to the terminal only, never logged.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import typer
import yaml

from rlark_devinfra import stack
from rlark_devinfra.paths import repo_root, state_dir

ADMIN = "admin"
CLUSTER = "local"
KEY_NAME = "demo"
JOB_NAME = "ray-cpu-demo"
OUTPUTS_PLACEHOLDER = "/tmp/rlark-demo-outputs"  # noqa: S108 - replaced before submission
"""The example's output volume source, replaced by ``.state/demo/outputs`` in the copy ``make run`` submits."""


class DemoError(RuntimeError):
    """A step of ``make run`` failed; the message says which and where to look."""


def say(message: str) -> None:
    typer.echo(f"==> {message}")


def cluster_file() -> Path:
    return repo_root() / "deploy" / "local-cluster.example.yaml"


def example_file() -> Path:
    return repo_root() / "examples" / "ray-cpu-training.yaml"


def shown(path: Path) -> str:
    """``path`` relative to the current directory when it is under it (shorter to read), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# ------------------------------------------------------------------------------------------ the console


def build_console() -> None:
    from rlark_devinfra.web import WebBuildError, build_web

    try:
        build_web()
    except (WebBuildError, OSError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        say(f"the web console is not built ({first}); the API and the CLI work without it")


# ---------------------------------------------------------------------------------------------- admin


def _login(gateway: str, password: str) -> bool:
    response = httpx.post(
        f"{gateway}/api/v1/auth/login", json={"username": ADMIN, "password": password}, timeout=30
    )
    return response.status_code == 200


def _create_admin(env: dict[str, str], password_file: Path) -> str:
    """``create-admin --reset``: a new admin, or the existing ``admin`` given the stored password."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "rlark_gateway", "create-admin", "--username", ADMIN),
            *("--reset", "--password-file", str(password_file)),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise DemoError(f"could not create the admin: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def ensure_admin(env: dict[str, str], gateway: str) -> tuple[str, bool]:
    """The admin's password, and whether it was made just now (then it is printed, once)."""
    password_file = state_dir() / "admin-password"
    if password_file.exists():
        password = password_file.read_text().strip()
        if _login(gateway, password):
            return password, False
        say(f"the password in {shown(password_file)} does not log {ADMIN!r} in; setting it again")
        _create_admin(env, password_file)
        return password, False
    password = secrets.token_urlsafe(18)
    stack.write_secret_file(password_file, password + "\n")
    _create_admin(env, password_file)
    return password, True


# ------------------------------------------------------------------------------------------------ CLI


def cli_env() -> dict[str, str]:
    """The environment of ``rlark`` commands run for this checkout (its own config directory)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RLARK_URL", "RLARK_TOKEN")}
    env["RLARK_CONFIG_DIR"] = str(state_dir() / "cli")
    return env


def ensure_cli_login(gateway: str, password: str) -> str:
    """An API token of the admin for the CLI of this checkout (reused while it works)."""
    config = state_dir() / "cli" / "config.json"
    if config.exists():
        saved = json.loads(config.read_text())
        token = str(saved.get("token") or "")
        if token and str(saved.get("url", "")).rstrip("/") == gateway:
            me = httpx.get(
                f"{gateway}/api/v1/auth/me", headers={"Authorization": f"Bearer {token}"}, timeout=30
            )
            if me.status_code == 200:
                return token
    done = subprocess.run(
        [
            *(sys.executable, "-m", "rlark_cli", "login", "--username", ADMIN, "--password-stdin"),
            *("--url", gateway, "--token-name", "make-run"),
        ],
        env=cli_env(),
        input=password + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise DemoError(f"rlark login failed: {done.stderr.strip()[-500:]}")
    return str(json.loads(config.read_text())["token"])


# ---------------------------------------------------------------------------------- cluster and agent


def ensure_cluster(http: httpx.Client) -> tuple[str, bool]:
    """The agent credential of the cluster ``local``, and whether it is new (a running agent then holds
    an old one)."""
    credential_file = state_dir() / "agent-credential"
    found = http.get(f"/api/v1/clusters/{CLUSTER}")
    if found.status_code == 404:
        body = {
            "name": CLUSTER,
            "display_name": "This machine",
            "category": "cloud",
            "region": "local",
            "runtime": "local",
            "pod_cidrs": [],
            "service_cidrs": [],
            "labels": {},
            "hostpath_allow": demo_hostpaths(),
        }
        created = http.post("/api/v1/clusters", json=body)
        if created.status_code != 201:
            raise DemoError(f"could not register cluster {CLUSTER!r}: {created.text[:500]}")
        stack.write_secret_file(credential_file, created.json()["agent_credential"])
        say(f"registered cluster {CLUSTER!r} (runtime local)")
        return credential_file.read_text(), True
    if found.status_code != 200:
        raise DemoError(f"cannot read cluster {CLUSTER!r}: {found.text[:500]}")
    if found.json().get("runtime") != "local":
        raise DemoError(f"a cluster named {CLUSTER!r} exists and is not a local-runtime cluster")
    allow_demo_outputs(http, found.json().get("hostpath_allow", []))
    if credential_file.exists():
        return credential_file.read_text(), False
    rotated = http.post(f"/api/v1/clusters/{CLUSTER}/credential")
    if rotated.status_code != 200:
        raise DemoError(f"could not rotate the credential of {CLUSTER!r}: {rotated.text[:500]}")
    stack.write_secret_file(credential_file, rotated.json()["agent_credential"])
    say(f"issued a new agent credential for {CLUSTER!r} ({shown(credential_file)} was missing)")
    return credential_file.read_text(), True


def demo_hostpaths() -> list[str]:
    """The host directories the ``local`` cluster lets workers mount (its hostPath policy, ADR 0006):
    the demo's outputs, and the code and outputs of ``examples/submit-rlinf-cpu.sh``. Nothing else of
    the state directory, nothing of the host."""
    return [
        str(outputs_dir()),
        str(state_dir() / "examples"),
        str(repo_root() / "examples" / "rlinf_cpu"),
    ]


def allow_demo_outputs(http: httpx.Client, allowed: list[str]) -> None:
    """Keep :func:`demo_hostpaths` in the cluster's hostPath policy, added to what an admin allowed (a
    cluster registered before the policy existed allows nothing)."""

    def covered(path: str) -> bool:
        return any(path == prefix or path.startswith(prefix.rstrip("/") + "/") for prefix in allowed)

    missing = [path for path in demo_hostpaths() if not covered(path)]
    if not missing:
        return
    changed = http.put(f"/api/v1/clusters/{CLUSTER}/hostpath-policy", json={"allow": [*allowed, *missing]})
    if changed.status_code != 200:
        raise DemoError(f"could not set the hostPath policy of {CLUSTER!r}: {changed.text[:500]}")
    say(f"cluster {CLUSTER!r} allows the hostPaths {', '.join(shown(Path(p)) for p in missing)}")


def start_agent(credential: str, renewed: bool, gateway: str) -> None:
    if renewed:
        stack.stop_agent()
    was_running = stack.running_pid(stack.AGENT) is not None
    pid = stack.start_agent(cluster_file(), credential, gateway)
    say(f"tunnel-agent of {CLUSTER!r} {'runs' if was_running else 'started'} (pid {pid})")


def wait_for_nodes(http: httpx.Client, timeout_s: float = 120) -> list[str]:
    declared = [n["name"] for n in yaml.safe_load(cluster_file().read_text())["nodes"]]
    deadline = time.monotonic() + timeout_s
    ready: list[str] = []
    while time.monotonic() < deadline:
        if stack.running_pid(stack.AGENT) is None:
            raise DemoError(f"the tunnel-agent exited; see {shown(state_dir() / 'logs')}/tunnel-agent.log")
        listed = http.get("/api/v1/nodes", params={"cluster": CLUSTER})
        if listed.status_code == 200:
            ready = sorted(n["name"] for n in listed.json()["items"] if n["ready"] and not n["gone"])
            if set(declared) <= set(ready):
                return ready
        time.sleep(1)
    raise DemoError(
        f"the nodes of {CLUSTER!r} did not all report within {timeout_s:.0f}s (ready: {ready}); see "
        f"{shown(state_dir() / 'logs')}/tunnel-agent.log"
    )


# ------------------------------------------------------------------------------------------ SSH key


def ensure_key(http: httpx.Client) -> None:
    listed = http.get("/api/v1/keys")
    listed.raise_for_status()
    if any(item["name"] == KEY_NAME for item in listed.json()["items"]):
        return
    private = state_dir() / "demo-key"
    if not private.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rlark-demo", "-f", str(private)],
            check=True,
        )
    public = private.with_name("demo-key.pub").read_text().strip()
    added = http.post("/api/v1/keys", json={"name": KEY_NAME, "public_key": public})
    if added.status_code != 201:
        raise DemoError(f"could not add the SSH key {KEY_NAME!r}: {added.text[:500]}")
    say(f"added SSH key {KEY_NAME!r} ({shown(private)}.pub)")


# ---------------------------------------------------------------------------------------------- job


def outputs_dir() -> Path:
    return state_dir() / "demo" / "outputs"


def render_job() -> Path:
    """The example with its output volume on ``.state/demo/outputs``; the file ``make run`` submits.

    Without root the local runtime's workers are plain processes that see the host's paths, and a hostPath
    volume is honoured only at its own path: the copy then also names ``.state/demo/outputs`` as the
    volume's container path (and the outputs under it) instead of ``/outputs``."""
    text = example_file().read_text()
    if OUTPUTS_PLACEHOLDER not in text:
        raise DemoError(f"{example_file()} no longer mounts {OUTPUTS_PLACEHOLDER}; update demo.py")
    outputs_dir().mkdir(parents=True, exist_ok=True)
    outputs_dir().chmod(0o1777)  # written by the jobs' unprivileged workers (ADR 0007)
    for made_by_root in ("checkpoints", "tensorboard"):  # by a demo run before ADR 0007 (workers were root)
        folder = outputs_dir() / made_by_root
        if folder.is_dir() and folder.stat().st_uid == 0:
            folder.chmod(0o1777)
    target = state_dir() / "demo" / example_file().name
    if os.geteuid() != 0:
        text = re.sub(r"(?<![\w.-])/outputs\b", str(outputs_dir()), text)
    target.write_text(text.replace(OUTPUTS_PLACEHOLDER, str(outputs_dir())))
    return target


def succeeded_demo_job(http: httpx.Client) -> dict[str, Any] | None:
    listed = http.get("/api/v1/jobs", params={"q": JOB_NAME, "status": "Succeeded", "page_size": 1})
    listed.raise_for_status()
    items = [job for job in listed.json()["items"] if job["name"] == JOB_NAME]
    return items[0] if items else None


def wait_placeable(http: httpx.Client, job_file: Path, timeout_s: float = 120) -> None:
    """Until the preview has no errors (the scheduler learns of new nodes a moment after the inventory)."""
    deadline = time.monotonic() + timeout_s
    errors: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        checked = http.post(
            "/api/v1/jobs:preview",
            content=job_file.read_bytes(),
            headers={"Content-Type": "application/yaml"},
        )
        checked.raise_for_status()
        errors = checked.json()["errors"]
        if not errors:
            return
        time.sleep(1)
    raise DemoError(f"the demo job cannot be submitted: {[e['message'] for e in errors]}")


def submit_and_follow(job_file: Path) -> tuple[str, int]:
    """``rlark jobs submit FILE --follow``, its output shown as it comes; (job id, exit code)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "rlark_cli", "jobs", "submit", str(job_file), "--follow"],
        env={**cli_env(), "COLUMNS": "120"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    job_id = ""
    for line in process.stdout:
        typer.echo(f"    {line.rstrip()}")
        found = re.search(r"submitted (job-[0-9a-f]+)", line)
        if found and not job_id:
            job_id = found.group(1)
    return job_id, process.wait()


def show_training_output(http: httpx.Client, job_id: str, header: str, lines: int = 12) -> None:
    """The last lines the run script printed on the Header (not the platform's markers, not Ray's)."""
    fetched = http.get(f"/api/v1/jobs/{job_id}/logs", params={"worker": header, "limit": "10000"})
    if fetched.status_code != 200:
        return
    texts = [json.loads(raw)["line"] for raw in fetched.text.splitlines() if raw.strip()]
    ours = [t for t in texts if not t.startswith("##rlark") and not _RAY_LOG.match(t)]
    if ours:
        say(f"last lines of the run script on the Header {header}:")
        for text in ours[-lines:]:
            typer.echo(f"    {text}")


_RAY_LOG = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+[A-Z]+ |^Server listening on |^Received signal "
)
"""Lines Ray (and sshd, and bash on a stop) print in every job: left out of the short summary."""


# -------------------------------------------------------------------------------------------- summary


def summary(gateway: str, password: str, new_password: bool, job_id: str, header: str) -> None:
    state = state_dir()
    cli = f"RLARK_CONFIG_DIR={shown(state / 'cli')} uv run rlark"
    console = gateway + ("" if (repo_root() / "web" / "dist" / "index.html").exists() else " (API only)")
    typer.echo("")
    typer.echo("RLark runs on this machine.")
    typer.echo(f"  console   {console}")
    typer.echo(f"            user {ADMIN}, password in {shown(state / 'admin-password')}")
    if new_password:
        typer.echo(f"            (shown this once: {password})")
    typer.echo(f"  CLI       {cli} jobs list      (logged in as {ADMIN})")
    typer.echo(f"  logs      {shown(state / 'logs')}/<service>.log and tunnel-agent.log (JSON lines)")
    if job_id:
        typer.echo(f"            {cli} jobs logs {job_id}")
        typer.echo(f"            {cli} jobs show {job_id}")
        typer.echo(f"  outputs   {shown(outputs_dir())}/checkpoints/{job_id}/global_step_N/")
        typer.echo(f"            {shown(outputs_dir())}/tensorboard/{job_id}/ (TensorBoard event files)")
        worker_dir = stack.agent_state_dir() / CLUSTER / "workers" / header
        typer.echo(f"            worker files: {shown(worker_dir)}/ (logs/, home/, work/)")
    typer.echo(f"  again     {cli} jobs submit {shown(state / 'demo' / example_file().name)} --follow")
    typer.echo("  stop      make stop")


def run() -> None:
    say("building the web console (cached)")
    build_console()
    say("starting PostgreSQL, Kafka and the services")
    env = stack.up()
    gateway = stack.GATEWAY.url
    for service in stack.SERVICES:
        say(f"{service.name:<10} {service.url}  log {shown(state_dir() / 'logs')}/{service.name}.log")
    password, new_password = ensure_admin(env, gateway)
    if new_password:
        say(f"created admin {ADMIN!r}; password stored in {shown(state_dir() / 'admin-password')} (mode 600)")
    token = ensure_cli_login(gateway, password)
    with httpx.Client(base_url=gateway, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        credential, renewed = ensure_cluster(http)
        start_agent(credential, renewed, gateway)
        nodes = wait_for_nodes(http)
        say(f"cluster {CLUSTER!r}: nodes {', '.join(nodes)} ready")
        ensure_key(http)
        job_file = render_job()
        done = succeeded_demo_job(http)
        if done is not None:
            say(f"the demo job {done['id']} already succeeded; not submitting it again")
            job_id, code = done["id"], 0
        else:
            wait_placeable(http, job_file)
            say(f"submitting {shown(example_file())} (outputs in {shown(outputs_dir())})")
            job_id, code = submit_and_follow(job_file)
        header = ""
        if job_id:
            detail = http.get(f"/api/v1/jobs/{job_id}").json()
            header = next((w["id"] for w in detail.get("workers", []) if w["is_header"]), "")
        if header:
            show_training_output(http, job_id, header)
    summary(gateway, password, new_password, job_id, header)
    if code != 0:
        raise DemoError(f"the demo job {job_id or '(not submitted)'} did not succeed (rlark exited {code})")


def main() -> None:
    try:
        run()
    except DemoError as exc:
        typer.echo(f"make run: {exc}", err=True)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
