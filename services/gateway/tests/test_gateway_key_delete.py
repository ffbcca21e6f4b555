"""Deleting an SSH key that pending or running jobs use: the gateway asks the scheduler (as the caller)
which active jobs use the key and answers 409 ``key_in_use`` naming them, unless ``force=true``; the
keys service is reached only when the delete goes ahead. Stand-in services record what they were asked;
the scheduler's side of the question (``GET /api/v1/jobs?ssh_key=``) is tested in the scheduler's suite."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import (
    ADMIN,
    ADMIN_PASSWORD,
    Stack,
    _create_database,
    _drop_database,
    echo_app,
    echo_upstream,
    gateway_settings,
)
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from rlark_devinfra.testing import TEST_SECRET, provision_test_prefix, running_service
from rlark_gateway.main import DEFINITION
from rlark_platform.identity import Caller, Role, SignedRequest, verify_caller
from rlark_platform.messaging import KafkaAccess

pytestmark = pytest.mark.integration

JOBS = [
    {"id": "job-1", "name": "grpo", "status": "Running"},
    {"id": "job-2", "name": "sft", "status": "Pending"},
]


class Services:
    """A scheduler that knows which jobs use key ``k-used`` and fails for ``k-broken``; a keys service
    that deletes anything. Both record the requests they got."""

    def __init__(self) -> None:
        self.scheduler: list[tuple[dict[str, str], Caller]] = []
        self.deleted: list[str] = []

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/scheduler/api/v1/jobs")
        async def jobs(request: Request) -> Response:
            # Checked as the scheduler checks it: the signature covers the path and the query as sent.
            raw_path = request.scope.get("raw_path") or request.url.path.encode()
            target = SignedRequest.target_of(raw_path, request.scope.get("query_string", b""))
            headers = {k: v for k, v in request.headers.items() if k.startswith("x-rlark-")}
            caller = verify_caller(TEST_SECRET, headers, SignedRequest("scheduler", "GET", target))
            self.scheduler.append((dict(request.query_params), caller.caller))
            key = request.query_params.get("ssh_key")
            if key == "k-broken":
                return JSONResponse({"error": {"code": "boom", "message": "boom"}}, status_code=500)
            items = JOBS if key == "k-used" else []
            return JSONResponse({"items": items, "total": len(items), "page": 1, "page_size": 100})

        @app.delete("/keys/api/v1/keys/{key_id}")
        async def delete(key_id: str) -> Response:
            self.deleted.append(key_id)
            return Response(status_code=204)

        app.router.routes.extend(echo_app().router.routes)
        return app


@pytest.fixture(scope="module")
async def services() -> Services:
    return Services()


@pytest.fixture(scope="module")
async def key_stack(
    services: Services, postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[Stack]:
    database_url = await _create_database(postgres_server_url)
    prefix = f"t{uuid.uuid4().hex[:10]}."
    await provision_test_prefix(kafka_admin, prefix)
    try:
        async with echo_upstream(services.app()) as upstream:
            settings = gateway_settings(
                database_url,
                kafka_bootstrap,
                prefix,
                upstream.url,
                bootstrap_admin_username=ADMIN,
                bootstrap_admin_password=ADMIN_PASSWORD,
            )
            async with running_service(DEFINITION, settings, worker=False) as service:
                yield Stack(service.url, settings, upstream.url, database_url)
    finally:
        await _drop_database(postgres_server_url, database_url)


async def test_a_key_jobs_use_is_not_deleted_and_the_jobs_are_named(
    key_stack: Stack, services: Services
) -> None:
    username, client = await key_stack.user_client()
    async with client:
        response = await client.delete("/api/v1/keys/k-used")
    assert response.status_code == 409, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == "key_in_use"
    assert error["field"] == "key_id"
    assert "job-1 (grpo, Running)" in error["message"]
    assert "job-2 (sft, Pending)" in error["message"]
    assert "force=true" in error["message"]
    assert error["details"] == {"key_id": "k-used", "total": 2, "jobs": JOBS}
    assert (error["message_key"], error["params"]["total"]) == ("key_in_use", 2)  # said in zh-CN too
    assert "k-used" not in services.deleted
    query, caller = services.scheduler[-1]
    assert caller == Caller(username, Role.USER)
    assert query == {"ssh_key": "k-used", "status": "Pending,Scheduled,Starting,Running", "page_size": "100"}


async def test_force_deletes_it_without_asking(key_stack: Stack, services: Services) -> None:
    _, client = await key_stack.user_client()
    asked = len(services.scheduler)
    async with client:
        response = await client.delete("/api/v1/keys/k-used", params={"force": "true"})
    assert response.status_code == 204, response.text
    assert services.deleted[-1] == "k-used"
    assert len(services.scheduler) == asked


async def test_a_key_no_active_job_uses_is_deleted(key_stack: Stack, services: Services) -> None:
    _, client = await key_stack.user_client()
    async with client:
        response = await client.delete("/api/v1/keys/k-free")
    assert response.status_code == 204, response.text
    assert services.deleted[-1] == "k-free"
    assert services.scheduler[-1][0]["ssh_key"] == "k-free"


async def test_when_the_scheduler_cannot_answer_nothing_is_deleted(
    key_stack: Stack, services: Services
) -> None:
    _, client = await key_stack.user_client()
    async with client:
        response = await client.delete("/api/v1/keys/k-broken")
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "service_unavailable"
    assert "k-broken" not in services.deleted


async def test_without_a_session_nothing_is_asked_or_deleted(key_stack: Stack, services: Services) -> None:
    asked = len(services.scheduler)
    async with key_stack.client() as anonymous:
        response = await anonymous.delete("/api/v1/keys/k-free")
    assert response.status_code == 401
    assert len(services.scheduler) == asked
