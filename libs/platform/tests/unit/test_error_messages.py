"""An API error whose message is a catalogue sentence carries its key and params (ADR 0011)."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict
from rlark_contracts.messages import text
from rlark_platform.errors import conflict, not_found
from rlark_platform.http import CallerDep, create_app
from rlark_platform.identity import Caller, Role
from rlark_platform.testing import GatewaySigned

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
