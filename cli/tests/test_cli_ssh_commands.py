"""`rlark ssh`, `rlark ssh-config`: the OpenSSH command line and config blocks they build, and the clear
refusals for a job that does not run or a worker it does not have (no gateway needed)."""

from __future__ import annotations

import shlex
import sys
from typing import Any

import pytest
import typer
from rlark_cli.commands.ssh import config_block, pick_worker, split_target, ssh_argv, websocket_url

WORKERS: list[dict[str, Any]] = [
    {
        "id": "job-1-actor-0",
        "role": "actor",
        "index": 0,
        "is_header": True,
        "cluster": "lab",
        "login_user": "rlark",
    },
    {
        "id": "job-1-rollout-1",
        "role": "rollout",
        "index": 1,
        "is_header": False,
        "cluster": "k8s",
        "login_user": "root",
    },
]
JOB = {"id": "job-1", "status": "Running", "workers": WORKERS}


def test_ssh_runs_the_system_ssh_through_the_hidden_proxy_as_the_workers_login_user() -> None:
    argv = ssh_argv("job-1", WORKERS[1], "/home/me/.ssh/id_ed25519", ["nvidia-smi", "-L"])
    assert argv[0] == "ssh"
    proxy = argv[argv.index("-o") + 1]
    assert proxy == f"ProxyCommand={shlex.quote(sys.executable)} -m rlark_cli.ssh_proxy job-1/job-1-rollout-1"
    assert "HostKeyAlias=job-1-rollout-1" in argv
    assert argv[argv.index("-i") + 1] == "/home/me/.ssh/id_ed25519"
    assert argv[-3:] == ["root@job-1-rollout-1", "nvidia-smi", "-L"]


def test_ssh_config_names_every_worker_by_its_id_with_user_and_proxy() -> None:
    block = config_block("job-1", WORKERS[0], None)
    lines = block.splitlines()
    assert lines[0] == "Host job-1-actor-0"
    assert "  User rlark" in lines
    assert f"  ProxyCommand {shlex.quote(sys.executable)} -m rlark_cli.ssh_proxy job-1/job-1-actor-0" in lines
    assert not any("IdentityFile" in line for line in lines)
    assert "  IdentityFile /k" in config_block("job-1", WORKERS[0], "/k").splitlines()


def test_a_worker_is_picked_by_role_and_index_or_id_and_the_header_by_default() -> None:
    assert pick_worker(JOB, None)["id"] == "job-1-actor-0"
    assert pick_worker(JOB, "rollout-1")["id"] == "job-1-rollout-1"
    assert pick_worker(JOB, "job-1-rollout-1")["id"] == "job-1-rollout-1"
    with pytest.raises(typer.Exit):
        pick_worker(JOB, "rollout-9")


def test_targets_and_gateway_urls() -> None:
    assert split_target("job-1") == ("job-1", None)
    assert split_target("job-1/actor-0") == ("job-1", "actor-0")
    with pytest.raises(typer.Exit):
        split_target("job-1/a/b")
    assert websocket_url("https://rlark.example.com/", "/api/x") == "wss://rlark.example.com/api/x"
    assert websocket_url("http://127.0.0.1:8080", "/api/x") == "ws://127.0.0.1:8080/api/x"
