"""Helpers for job end-to-end tests: an SSH key pair, a job document, waiting for a status, log lines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from stack import Stack, eventually

TERMINAL = {"Succeeded", "Failed", "Cancelled", "Lost"}


def make_public_key(tmp: Path, name: str) -> str:
    path = tmp / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True)
    return (tmp / f"{name}.pub").read_text().strip()


async def add_key(stack: Stack, name: str, public_key: str, token: str | None = None) -> None:
    async with stack.client(token) as client:
        response = await client.post("/api/v1/keys", json={"name": name, "public_key": public_key})
        assert response.status_code == 201, response.text


async def wait_placeable(
    stack: Stack, document: dict[str, Any], token: str | None = None, timeout_s: float = 60
) -> None:
    """Wait until the preview reports no errors, as a user re-checking the form would (the scheduler learns
    about new nodes through events, a moment after the inventory shows them)."""

    errors: list[Any] = []

    async def clean() -> bool:
        async with stack.client(token) as client:
            response = await client.post("/api/v1/jobs:preview", json=document)
            assert response.status_code == 200, response.text
            errors[:] = response.json()["errors"]
            return not errors

    try:
        await eventually(clean, timeout_s=timeout_s, interval_s=0.5, what="a job preview without errors")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the preview's errors: {errors}") from None


async def submit(stack: Stack, document: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    async with stack.client(token) as client:
        response = await client.post("/api/v1/jobs", json=document)
        assert response.status_code == 201, response.text
        return response.json()  # type: ignore[no-any-return]


async def job(stack: Stack, job_id: str, token: str | None = None) -> dict[str, Any]:
    async with stack.client(token) as client:
        response = await client.get(f"/api/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]


async def wait_status(
    stack: Stack, job_id: str, statuses: set[str], timeout_s: float = 240
) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def reached() -> dict[str, Any] | None:
        current = await job(stack, job_id)
        seen.update(current)
        if current["status"] in statuses:
            return current
        if current["status"] in TERMINAL:
            raise AssertionError(f"job ended {current['status']}: {current['reason']}")
        return None

    try:
        return await eventually(
            reached, timeout_s=timeout_s, interval_s=0.5, what=f"job {job_id} in {statuses}"
        )  # type: ignore[no-any-return]
    except AssertionError as exc:
        workers = [(w["id"], w["phase"], w["reason"]) for w in seen.get("workers", [])]
        raise AssertionError(
            f"{exc}; status {seen.get('status')}: {seen.get('reason')}; workers {workers}"
        ) from None


async def logs(stack: Stack, job_id: str, worker: str | None = None) -> list[dict[str, Any]]:
    params = {"limit": "10000", **({"worker": worker} if worker else {})}
    async with stack.client() as client:
        response = await client.get(f"/api/v1/jobs/{job_id}/logs", params=params)
        assert response.status_code == 200, response.text
        return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def document(name: str, tasks: list[dict[str, Any]], run_script: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rlark.io/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "type": "custom",
            "header": tasks[0]["name"],
            "runScript": run_script,
            "tasks": tasks,
            **spec,
        },
    }


def role(name: str, replicas: int, cluster: str = "lab", **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "cluster": cluster,
        "replicas": replicas,
        "gpusPerWorker": 0,
        "image": "python:3.11-slim",
        "nodeSelector": {},
        **fields,
    }
