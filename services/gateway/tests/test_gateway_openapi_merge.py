"""The gateway's API document merges the services' documents in place of its catch-all proxy entries."""

from __future__ import annotations

from typing import Any

from rlark_gateway.api.openapi import GATEWAY_ANSWERS, merge_documents

OWN: dict[str, Any] = {
    "openapi": "3.1.0",
    "paths": {
        "/api/v1/users": {"get": {"responses": {"200": {"description": "ok"}}}},
        "/api/v1/jobs{rest}": {"get": {"responses": {"200": {"description": "ok"}}}},
        "/api/v1/templates{rest}": {"get": {"responses": {"200": {"description": "ok"}}}},
        "/api/v1/keys{rest}": {"get": {"responses": {"200": {"description": "ok"}}}},
    },
    "components": {"schemas": {"ErrorBody": {"type": "object"}, "Page": {"type": "object"}}},
}
SCHEDULER: dict[str, Any] = {
    "paths": {
        "/api/v1/jobs/{job_id}": {
            "get": {
                "operationId": "job",
                "tags": ["internal"],
                "responses": {
                    "200": {
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Page"}}}
                    },
                    "404": {"description": "no such job"},
                },
            },
            "parameters": [{"name": "job_id", "in": "path"}],
        },
        "/api/v1/jobs:preview": {"post": {"responses": {"200": {"description": "ok"}}}},
        "/api/v1/templates": {"get": {"responses": {"200": {"description": "ok"}}}},
        "/internal/metrics-like": {"get": {"responses": {"200": {"description": "ok"}}}},
    },
    "components": {"schemas": {"Page": {"type": "object", "title": "scheduler's Page"}}},
}


def test_a_services_operations_replace_its_catch_alls_with_the_gateways_answers_added() -> None:
    merged = merge_documents(OWN, {"scheduler": SCHEDULER})
    paths = merged["paths"]
    assert "/api/v1/jobs{rest}" not in paths
    assert "/api/v1/templates{rest}" not in paths
    assert {"/api/v1/jobs/{job_id}", "/api/v1/jobs:preview", "/api/v1/templates"} <= paths.keys()
    assert "/internal/metrics-like" not in paths, "only routes the gateway forwards"
    operation = paths["/api/v1/jobs/{job_id}"]["get"]
    assert operation["tags"] == ["jobs"]
    assert operation["operationId"] == "scheduler_job"
    assert {str(s) for s in GATEWAY_ANSWERS} | {"200", "404"} == set(operation["responses"])
    assert operation["responses"]["404"] == {"description": "no such job"}, "the service's own answer wins"
    assert paths["/api/v1/jobs/{job_id}"]["parameters"] == [{"name": "job_id", "in": "path"}]


def test_service_schemas_are_renamed_so_equal_names_never_collide() -> None:
    merged = merge_documents(OWN, {"scheduler": SCHEDULER})
    schemas = merged["components"]["schemas"]
    assert schemas["Page"] == {"type": "object"}
    assert schemas["scheduler.Page"]["title"] == "scheduler's Page"
    ok = merged["paths"]["/api/v1/jobs/{job_id}"]["get"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/scheduler.Page"}


def test_a_service_that_did_not_answer_keeps_its_catch_all_and_nothing_is_changed_in_place() -> None:
    merged = merge_documents(OWN, {"scheduler": SCHEDULER})
    assert "/api/v1/keys{rest}" in merged["paths"]
    assert "/api/v1/jobs{rest}" in OWN["paths"]
    assert SCHEDULER["paths"]["/api/v1/jobs/{job_id}"]["get"]["tags"] == ["internal"]
