"""An API error whose message is a catalogue sentence carries its key and params (ADR 0011)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict
from rlark_contracts.messages import render, text
from rlark_devinfra.testing import GatewaySigned
from rlark_platform.errors import conflict, not_found
from rlark_platform.http import CallerDep, create_app
from rlark_platform.identity import Caller, Role

SECRET = "s" * 32


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str


def build() -> FastAPI:
    app = create_app("test", internal_secret=SECRET)

    @app.post("/domains")
    async def create(body: Body, _: CallerDep) -> None:
        if body.name == "taken":
            raise conflict("domain_exists", text("domain_exists", name=repr(body.name)), "name")
        raise not_found("cluster", body.name)

    return app


async def post(json: object) -> dict[str, object]:
    transport = httpx.ASGITransport(app=build())
    auth = GatewaySigned(Caller("ann", Role.USER), "test", SECRET)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", auth=auth) as client:
        response = await client.post("/domains", json=json)
    error: dict[str, object] = response.json()["error"]
    return error


async def test_a_catalogue_sentence_travels_with_its_key_and_params_next_to_the_english() -> None:
    assert await post({"name": "taken"}) == {
        "code": "domain_exists",
        "message": "a network domain named 'taken' already exists",
        "field": "name",
        "message_key": "domain_exists",
        "params": {"name": "'taken'"},
    }


async def test_not_found_says_which_thing_as_a_sentence_of_its_own() -> None:
    error = await post({"name": "gpu-a"})
    assert (error["code"], error["message_key"], error["params"]) == (
        "cluster_not_found",
        "cluster_not_found",
        {"name": "'gpu-a'"},
    )
    assert error["message"] == "cluster 'gpu-a' does not exist"


async def test_a_missing_and_an_unknown_field_are_catalogue_sentences_too() -> None:
    error = await post({"other": 1})
    details = error["details"]
    assert isinstance(details, dict)
    keys = {(d["field"], d.get("message_key")) for d in details["errors"]}
    assert keys == {("name", "invalid_request.missing"), ("other", "invalid_request.extra_forbidden")}
    assert error["message_key"] == "invalid_request.missing"
    assert error["message"] == "name: Field required"


def several_routes() -> FastAPI:
    """Three JSON routes as services write them: a body model, a path plus body, a list body."""
    app = create_app("test", internal_secret=SECRET)

    @app.post("/domains")
    async def create(body: Body, _: CallerDep) -> dict[str, str]:
        return {"name": body.name}

    @app.put("/jobs/{job_id}/keys")
    async def keys(job_id: str, body: Body, _: CallerDep) -> dict[str, str]:
        return {"job": job_id}

    @app.post("/webhooks")
    async def hooks(body: list[Body], _: CallerDep) -> int:
        return len(body)

    return app


async def send(method: str, path: str, content: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=several_routes())
    auth = GatewaySigned(Caller("ann", Role.USER), "test", SECRET)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", auth=auth) as client:
        return await client.request(
            method, path, content=content, headers={"Content-Type": "application/json"}
        )


ROUTES = [("POST", "/domains"), ("PUT", "/jobs/j1/keys"), ("POST", "/webhooks")]


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize(
    ("body", "key"),
    [
        (b'{"name": "\xff\xfe caf\xe9"}', "invalid_request.body_not_utf8"),
        (b"[" * 100_000 + b"]" * 100_000, "invalid_request.body_too_deep"),
        (b'{"name": ', "invalid_request.json_invalid"),
    ],
    ids=["not-utf8", "nested-100000-deep", "not-json"],
)
async def test_a_body_that_cannot_be_decoded_is_a_422_in_the_error_envelope_on_every_route(
    method: str, path: str, body: bytes, key: str
) -> None:
    response = await send(method, path, body)
    assert response.status_code == 422, response.text
    assert set(response.json()) == {"error"}
    error = response.json()["error"]
    assert (error["code"], error["field"], error["message_key"]) == ("invalid_request", "body", key)
    assert error["message"].startswith("body: ")
    assert render(error["message_key"], error["params"], "zh-CN").startswith("body：")


async def test_the_frameworks_own_answers_are_in_the_error_envelope_too() -> None:
    missing = await send("POST", "/nowhere", b"{}")
    wrong_method = await send("DELETE", "/domains", b"")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    assert (wrong_method.status_code, wrong_method.json()["error"]["code"]) == (405, "method_not_allowed")


class Labelled(BaseModel):
    model_config = ConfigDict(extra="forbid")
    labels: dict[str, int]
    names: list[int]


async def test_a_mapping_key_that_looks_like_a_number_is_never_named_as_a_list_index() -> None:
    app = create_app("test", internal_secret=SECRET)

    @app.post("/labelled")
    async def create(body: Labelled, _: CallerDep) -> None:
        return None

    transport = httpx.ASGITransport(app=app)
    auth = GatewaySigned(Caller("ann", Role.USER), "test", SECRET)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", auth=auth) as client:
        response = await client.post("/labelled", json={"labels": {"1": "one"}, "names": [0, "x"]})
    fields = [e["field"] for e in response.json()["error"]["details"]["errors"]]
    assert fields == ['labels["1"]', "names[1]"]
