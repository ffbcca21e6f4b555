"""Submission and preview through the real API: every rule family refuses with 422, the first problem
as the main error and all of them in details, nothing stored; secrets are refused without being
echoed; preview always answers 200 with the normalised YAML, problems and per-cluster plan; jobs
that can never fit are refused with the reason; lists show only one's own jobs."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from rlark_contracts import TopicNames
from rlark_devinfra.testing import RunningService
from rlark_platform.identity import Role
from rlark_platform.messaging import KafkaAccess, create_producer
from scheduler_it_support import (
    IMAGE,
    World,
    as_yaml,
    job_doc,
    nodes_synced,
    role,
    submit,
    synced,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def fleet(shared_scheduler: RunningService, kafka_admin: KafkaAccess) -> AsyncIterator[RunningService]:
    """Cluster "va" (3 ready A100 nodes with 8 GPUs, one of them busy), "vb" offline with one node,
    alice's key "laptop", and network domains "dom-b" and "dom-a"."""
    producer: AIOKafkaProducer = await create_producer(kafka_admin, "scheduler-it-fleet")
    world = World(producer, TopicNames(shared_scheduler.settings.topic_prefix))
    try:
        await world.cluster("va")
        await world.cluster("vb", online=False)
        await world.node("va", "n1")
        await world.node("va", "n2")
        await world.node("va", "n3", gpu_allocated=8)
        await world.node("vb", "m1")
        await world.key("alice", "laptop")
        await world.domain("dom-b", "10.200.0.0/16")
        await world.domain("dom-a", "10.100.0.0/16")
        url = shared_scheduler.settings.own_database_url()
        await nodes_synced(url, "va", 3)
        await nodes_synced(url, "vb", 1)
        await synced(url, "SELECT count(*) FROM ssh_keys", expect=1)
        await synced(url, "SELECT count(*) FROM network_domains", expect=2)
        await synced(url, "SELECT count(*) FROM clusters WHERE NOT online", expect=1)
    finally:
        await producer.stop()
    return shared_scheduler


def base_doc(**spec: Any) -> dict[str, Any]:
    return job_doc(
        role("actor", "va", gpusPerWorker=8),
        role("rollout", "va", replicas=1, gpusPerWorker=4),
        header="actor",
        **spec,
    )


def changed(path: list[str | int], value: Any, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of ``doc`` (default: ``base_doc()``) with the value at ``path`` replaced (None deletes)."""
    result = copy.deepcopy(doc or base_doc())
    target: Any = result
    for part in path[:-1]:
        target = target[part]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return result


async def job_total(svc: RunningService, user: str = "alice") -> int:
    async with svc.client(user) as client:
        total: int = (await client.get("/api/v1/jobs")).json()["total"]
    return total


REFUSALS: list[tuple[str, dict[str, Any] | str, str, str]] = [
    # (case, document, expected code, expected field)
    ("yaml syntax", "metadata: {name: x\nspec: [", "yaml_syntax", ""),
    ("duplicate key", "metadata: {name: a}\nmetadata: {name: b}\nspec: {}\n", "duplicate_key", "metadata"),
    ("unknown field", changed(["spec", "gpus"], 8), "field_unknown", "spec.gpus"),
    ("missing field", changed(["spec", "tasks", 0, "image"], None), "field_required", "spec.tasks[0].image"),
    ("empty document", "", "document_empty", ""),
    ("name too long", changed(["metadata", "name"], "x" * 129), "name_length", "metadata.name"),
    (
        "unknown template",
        changed(["spec", "type"], "template", changed(["spec", "template"], "nope")),
        "template_unknown",
        "spec.template",
    ),
    ("priority", changed(["spec", "priority"], 101), "priority_out_of_range", "spec.priority"),
    ("no roles", changed(["spec", "tasks"], []), "tasks_missing", "spec.tasks"),
    (
        "role name",
        changed(["spec", "tasks", 1, "name"], "Roll_Out"),
        "role_name_invalid",
        "spec.tasks[1].name",
    ),
    (
        "duplicate role",
        changed(["spec", "tasks", 1, "name"], "actor"),
        "role_name_duplicate",
        "spec.tasks[1].name",
    ),
    ("header missing", changed(["spec", "header"], None), "header_missing", "spec.header"),
    ("header unknown", changed(["spec", "header"], "ghost"), "header_unknown_role", "spec.header"),
    (
        "header replicas",
        changed(["spec", "tasks", 0, "replicas"], 2),
        "header_replicas",
        "spec.tasks[0].replicas",
    ),
    ("run script", changed(["spec", "runScript"], None), "run_script_missing", "spec.runScript"),
    (
        "cluster unknown",
        changed(["spec", "tasks", 1, "cluster"], "nowhere"),
        "cluster_unknown",
        "spec.tasks[1].cluster",
    ),
    ("replicas", changed(["spec", "tasks", 1, "replicas"], 0), "replicas_invalid", "spec.tasks[1].replicas"),
    (
        "gpus range",
        changed(["spec", "tasks", 1, "gpusPerWorker"], 65),
        "gpus_invalid",
        "spec.tasks[1].gpusPerWorker",
    ),
    (
        "gpus above any node",
        changed(["spec", "tasks", 1, "gpusPerWorker"], 16),
        "gpus_exceed_node",
        "spec.tasks[1].gpusPerWorker",
    ),
    (
        "image latest",
        changed(["spec", "tasks", 0, "image"], "rlinf/rlinf:latest"),
        "image_latest_refused",
        "spec.tasks[0].image",
    ),
    (
        "image untagged",
        changed(["spec", "tasks", 0, "image"], "rlinf/rlinf"),
        "image_tag_required",
        "spec.tasks[0].image",
    ),
    (
        "image invalid",
        changed(["spec", "tasks", 0, "image"], "Bad Image:1"),
        "image_invalid",
        "spec.tasks[0].image",
    ),
    (
        "selector key",
        changed(["spec", "tasks", 1, "nodeSelector"], {"bad key!": "x"}),
        "selector_key_invalid",
        'spec.tasks[1].nodeSelector["bad key!"]',
    ),
    (
        "selector value",
        changed(["spec", "tasks", 1, "nodeSelector"], {"zone": "a b"}),
        "selector_value_invalid",
        "spec.tasks[1].nodeSelector.zone",
    ),
    (
        "selector matches none",
        changed(["spec", "tasks", 1, "nodeSelector"], {"rlark.io/gpu-model": "H100"}),
        "selector_matches_too_few",
        "spec.tasks[1].nodeSelector",
    ),
    (
        "mount",
        changed(
            ["spec", "tasks", 1, "mounts"],
            [{"name": "d", "type": "objectStorage", "source": "s3://b/p", "path": "/d"}],
        ),
        "mount_invalid",
        "spec.tasks[1].mounts[0].secretRef",
    ),
    ("relative path", changed(["spec", "outputs"], ["out"]), "path_not_absolute", "spec.outputs[0]"),
    (
        "env name",
        changed(["spec", "tasks", 1, "env"], {"1BAD": "x"}),
        "env_name_invalid",
        'spec.tasks[1].env["1BAD"]',
    ),
    (
        "env reserved",
        changed(["spec", "tasks", 1, "env"], {"RLINF_NODE_RANK": "3"}),
        "env_name_reserved",
        "spec.tasks[1].env.RLINF_NODE_RANK",
    ),
    ("ssh key", changed(["spec", "sshKeys"], ["laptop", "nope"]), "ssh_key_unknown", "spec.sshKeys[1]"),
    (
        "network domain",
        changed(["spec", "networkDomain"], "dom-x"),
        "network_domain_unknown",
        "spec.networkDomain",
    ),
    (
        "rlinf num_nodes",
        changed(["spec", "rlinfConfig"], {"cluster": {"num_nodes": 3}}),
        "rlinf_num_nodes_mismatch",
        "spec.rlinfConfig.cluster.num_nodes",
    ),
    # Hostile documents (issue 31): a 4xx naming what is wrong, never a 500.
    (
        "python tag",
        "metadata: {name: x}\nspec: !!python/object/apply:os.system [id]\n",
        "yaml_tag_refused",
        "spec",
    ),
    (
        "json 100,000 deep",
        '{"metadata": {"name": "x"}, "spec": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "document_too_deep",
        "",
    ),
    ("wrapped json 100,000 deep", '{"yaml": ' + "[" * 100_000 + "]" * 100_000 + "}", "document_too_deep", ""),
    (
        "yaml 50,000 deep",
        "metadata: {name: x}\nspec: " + "[" * 50_000 + "]" * 50_000 + "\n",
        "document_too_deep",
        "",
    ),
    (
        "a value yaml cannot build",
        as_yaml(base_doc()) + "  rlinfConfig: {day: 2024-13-45}\n",
        "yaml_value_invalid",
        "spec.rlinfConfig.day",
    ),
    (
        "a key that is not a string",
        as_yaml(changed(["spec", "restartPolicy"], {True: ["WorkerLost"]})),
        "field_invalid",
        "spec.restartPolicy.true",
    ),
]


@pytest.mark.parametrize(("case", "doc", "code", "field"), REFUSALS, ids=[r[0] for r in REFUSALS])
async def test_each_rule_refuses_the_job_with_its_code_and_field_and_stores_nothing(
    fleet: RunningService, case: str, doc: dict[str, Any] | str, code: str, field: str
) -> None:
    before = await job_total(fleet)
    async with fleet.client() as client:
        response = await submit(client, doc)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    found = {(e["code"], e["field"]) for e in error["details"]["errors"]}
    assert (code, field) in found, found
    first = error["details"]["errors"][0]
    assert (error["code"], error["message"], error["field"] or "") == (
        first["code"],
        first["message"],
        first["field"],
    )
    assert await job_total(fleet) == before


async def test_every_problem_is_reported_at_once_with_lines(fleet: RunningService) -> None:
    doc = changed(["spec", "tasks", 0, "image"], "rlinf/rlinf:latest", changed(["spec", "priority"], 500))
    async with fleet.client() as client:
        response = await submit(client, as_yaml(doc))
    errors = response.json()["error"]["details"]["errors"]
    assert {e["code"] for e in errors} >= {"image_latest_refused", "priority_out_of_range"}
    image = next(e for e in errors if e["code"] == "image_latest_refused")
    assert as_yaml(doc).splitlines()[image["line"] - 1].strip().startswith("image:")
    # Each problem can be said in the user's language (ADR 0011): its catalogue key and params.
    assert (image["message_key"], image["params"]) == (
        "image_latest_refused",
        {"field": "spec.tasks[0].image"},
    )
    assert all(e["message_key"] for e in errors)
    assert response.json()["error"]["message_key"] == errors[0]["message_key"]


SECRETS = [
    ("password in env", ["spec", "tasks", 1, "env"], {"DB_PASSWORD": "hunter2-Secret"}, "hunter2-Secret"),
    (
        "private key in a script",
        ["spec", "tasks", 1, "prepareScript"],
        "cat > ~/.ssh/id <<EOF\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\nEOF\n",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
    ),
    (
        "access token",
        ["spec", "runScript"],
        "HF_TOKEN=hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 python train.py\n",
        "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    ),
    (
        "object storage key",
        ["spec", "tasks", 0, "env"],
        {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    (
        "password in a URL",
        ["spec", "runScript"],
        "python train.py --db postgres://ml:s3cretpw@db:5432/x\n",
        "s3cretpw",
    ),
]


@pytest.mark.parametrize(("case", "path", "value", "secret"), SECRETS, ids=[s[0] for s in SECRETS])
async def test_secrets_are_refused_with_field_and_line_and_never_echoed(
    fleet: RunningService, case: str, path: list[str | int], value: Any, secret: str
) -> None:
    text = as_yaml(changed(path, value))
    async with fleet.client() as client:
        response = await submit(client, text)
        preview = await client.post("/api/v1/jobs:preview", content=text)
    assert response.status_code == 422
    assert secret not in response.text
    assert secret not in preview.text
    errors = [e for e in response.json()["error"]["details"]["errors"] if e["code"] == "secret_detected"]
    assert errors
    assert all(e["line"] for e in errors)
    assert any(e["field"].startswith(".".join(str(p) for p in path[:2])) for e in errors)


async def test_preview_answers_200_with_normalised_yaml_default_domain_and_plan(
    fleet: RunningService,
) -> None:
    doc = job_doc(
        role("rollout", "va", replicas=2, gpusPerWorker=4),
        role("actor", "va", gpusPerWorker=4),
        header="actor",
    )
    async with fleet.client() as client:
        ok = await client.post(
            "/api/v1/jobs:preview", content=as_yaml(doc), headers={"Content-Type": "application/yaml"}
        )
        wrapped = await client.post("/api/v1/jobs:preview", json={"yaml": as_yaml(doc)})
        bad = await client.post(
            "/api/v1/jobs:preview", json=changed(["spec", "tasks", 0, "image"], "x:latest", doc)
        )
        broken = await client.post("/api/v1/jobs:preview", content="spec: [")
    assert ok.status_code == wrapped.status_code == bad.status_code == broken.status_code == 200
    body = ok.json()
    assert body == wrapped.json()
    assert body["errors"] == []
    rendered = body["yaml"]
    assert "networkDomain: dom-a" in rendered  # first domain by name
    assert "apiVersion: rlark.io/v1" in rendered
    assert "priority: 0" in rendered
    assert rendered.index("name: rollout") < rendered.index("name: actor")  # spec order kept
    (plan,) = body["plan"]
    assert (plan["cluster"], plan["known"], plan["online"], plan["gpus"]) == ("va", True, True, 12)
    assert [(w["role"], w["index"], w["rank"], w["is_header"]) for w in plan["workers"]] == [
        ("actor", 0, 0, True),
        ("rollout", 0, 1, False),
        ("rollout", 1, 2, False),
    ]
    # Only 2 nodes have 4 free GPUs now: a warning (it would wait), not an error.
    assert any(w["code"] == "selector_matches_too_few" for w in body["warnings"])
    assert [e["code"] for e in bad.json()["errors"]] == ["image_latest_refused"]
    assert bad.json()["yaml"].count("image: x:latest") == 1
    assert broken.json()["errors"][0]["code"] == "yaml_syntax"
    assert broken.json()["yaml"] == ""


async def test_preview_warns_about_an_offline_cluster_and_submit_accepts_with_warnings(
    fleet: RunningService,
) -> None:
    doc = job_doc(role("w", "vb"), name="offline cluster job")
    async with fleet.client() as client:
        preview = await client.post("/api/v1/jobs:preview", json=doc)
        response = await submit(client, doc)
    assert preview.json()["errors"] == []
    assert "cluster_offline" in {w["code"] for w in preview.json()["warnings"]}
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "Pending"
    assert job["owner"] == "alice"
    assert "cluster_offline" in {w["code"] for w in job["warnings"]}
    assert job["network_domain"] == "dom-a"
    async with fleet.client() as client:
        assert (await client.post(f"/api/v1/jobs/{job['id']}:cancel")).status_code == 200


async def test_network_domain_none_keeps_a_single_cluster_job_out_of_the_default_domain(
    fleet: RunningService,
) -> None:
    doc = job_doc(role("w", "vb"), name="no domain job", networkDomain="none")
    across = job_doc(role("w", "va"), role("v", "vb"), header="w", networkDomain="none")
    async with fleet.client() as client:
        preview = await client.post("/api/v1/jobs:preview", json=doc)
        response = await submit(client, doc)
        refused = await submit(client, across)
    assert "networkDomain: none" in preview.json()["yaml"]  # resubmitting the normalised YAML keeps it
    assert response.status_code == 201, response.text
    assert response.json()["network_domain"] is None
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "network_domain_missing"
    assert refused.json()["error"]["params"] == {"clusters": 2}
    async with fleet.client() as client:
        detail = (await client.get(f"/api/v1/jobs/{response.json()['id']}")).json()
        assert (await client.post(f"/api/v1/jobs/{response.json()['id']}:cancel")).status_code == 200
    # The timeline's first row keeps its sentence's key, so the console says "已提交" (ADR 0011).
    submitted = detail["timeline"][0]
    assert (submitted["reason"], submitted["details"]["said"]) == (
        "submitted",
        {"message_key": "job.submitted", "params": {}},
    )


async def test_a_job_that_can_never_fit_is_refused_with_the_reason(fleet: RunningService) -> None:
    doc = changed(["spec", "tasks", 1, "replicas"], 3)  # va has 3 nodes, the actor takes one of them
    async with fleet.client() as client:
        too_many = await submit(client, doc)
        too_big = await submit(client, changed(["spec", "tasks", 0, "gpusPerWorker"], 12))
    assert too_many.status_code == 422
    error = too_many.json()["error"]
    assert error["code"] == "selector_matches_too_few"
    assert "together need 4 distinct nodes, but only 3 nodes can host them" in error["message"]
    assert too_big.json()["error"]["message"] == (
        'spec.tasks[0].gpusPerWorker is 12 but the largest node of cluster "va" matching the selector has 8 GPUs'
    )


async def test_lists_show_own_jobs_filtered_and_other_users_jobs_are_not_found(fleet: RunningService) -> None:
    async with fleet.client("bob") as bob:
        created = await submit(bob, job_doc(role("w", "va"), name="bob's sweep"))
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        mine = (await bob.get("/api/v1/jobs")).json()
        by_q = (await bob.get("/api/v1/jobs", params={"q": "SWEEP"})).json()
        by_status = (await bob.get("/api/v1/jobs", params={"status": "Succeeded,Failed"})).json()
        bad_status = await bob.get("/api/v1/jobs", params={"status": "Done"})
    assert [j["id"] for j in mine["items"]] == [job_id]
    assert mine["items"][0]["worker_count"] == 1
    assert mine["items"][0]["clusters"] == ["va"]
    assert [j["id"] for j in by_q["items"]] == [job_id]
    assert by_status["total"] == 0
    assert bad_status.status_code == 422
    assert bad_status.json()["error"]["field"] == "status"
    async with fleet.client("carol") as carol:
        assert (await carol.get(f"/api/v1/jobs/{job_id}")).status_code == 404
        assert (await carol.get(f"/api/v1/jobs/{job_id}/events")).status_code == 404
        assert (await carol.put(f"/api/v1/jobs/{job_id}/ssh-keys", json={"ssh_keys": []})).status_code == 404
        assert job_id not in {j["id"] for j in (await carol.get("/api/v1/jobs")).json()["items"]}
        assert (await carol.get("/api/v1/jobs", params={"owner": "bob"})).json()["total"] == 0
    async with fleet.client("root", Role.ADMIN) as admin:
        assert (await admin.get(f"/api/v1/jobs/{job_id}")).status_code == 200
        assert job_id in {
            j["id"] for j in (await admin.get("/api/v1/jobs", params={"owner": "bob"})).json()["items"]
        }
    async with fleet.anonymous() as anonymous:
        assert (await anonymous.get("/api/v1/jobs")).status_code == 401


async def test_templates_list_and_render_starter_documents(fleet: RunningService) -> None:
    async with fleet.client() as client:
        templates = (await client.get("/api/v1/templates")).json()["items"]
        rendered = await client.post(
            "/api/v1/templates/single-node:render",
            json={"params": {"cluster": "va", "image": IMAGE, "gpusPerWorker": 4}},
        )
        # A cluster is no longer required: left out, the scheduler chooses (ADR 0026).
        anywhere = await client.post(
            "/api/v1/templates/single-node:render", json={"params": {"image": IMAGE}}
        )
        refused = await client.post(
            "/api/v1/templates/single-node:render", json={"params": {"gpusPerWorker": 4}}
        )  # no image
        missing = await client.post("/api/v1/templates/nope:render", json={"params": {}})
        preview = await client.post("/api/v1/jobs:preview", content=rendered.json()["yaml"])
    assert [t["id"] for t in templates] == ["single-node", "rl-actor-rollout", "rl-actor-rollout-env"]
    assert all(t["example_yaml"].startswith("apiVersion: rlark.io/v1") for t in templates)
    assert "cluster" in templates[0]["params_schema"]["properties"]
    assert rendered.status_code == 200
    assert preview.json()["errors"] == []
    assert anywhere.status_code == 200
    assert all("cluster" not in task for task in yaml.safe_load(anywhere.json()["yaml"])["spec"]["tasks"])
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "params.image"
    assert missing.status_code == 404


async def test_an_oversized_body_is_refused_before_parsing(fleet: RunningService) -> None:
    async with fleet.client() as client:
        response = await client.post("/api/v1/jobs", content=b"#" * 1_000_001)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "document_too_large"


async def test_preview_answers_hostile_documents_with_their_errors_never_a_500(fleet: RunningService) -> None:
    hostile = [
        (doc, code)
        for case, doc, code, _ in REFUSALS
        if isinstance(doc, str) and code.startswith(("yaml", "document"))
    ]
    async with fleet.client() as client:
        for doc, code in hostile:
            response = await client.post("/api/v1/jobs:preview", content=doc)
            assert response.status_code == 200, response.text[:300]
            assert [e["code"] for e in response.json()["errors"]] == [code]


async def test_the_documented_restart_policy_with_its_on_key_is_accepted(fleet: RunningService) -> None:
    text = as_yaml(base_doc()) + "  restartPolicy:\n    maxRestarts: 2\n    on: [WorkerLost, NodeGone]\n"
    async with fleet.client() as client:
        response = await submit(client, text)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["spec"]["restartPolicy"]["on"] == ["WorkerLost", "NodeGone"]


async def test_a_token_in_an_image_tag_is_refused_and_shown_nowhere_in_preview_or_submit(
    fleet: RunningService,
) -> None:
    token = "ghp_" + "Zq8Kp3Lm7Nx2Vb6Tc9Rd4Wf1Hg5Js0Ya8Ue3I"
    doc = changed(["spec", "tasks", 1, "image"], f"registry.example.com/rlinf:{token}")
    async with fleet.client() as client:
        preview = await client.post("/api/v1/jobs:preview", content=as_yaml(doc))
        refused = await submit(client, as_yaml(doc))
    assert refused.status_code == 422
    assert "secret_detected" in {e["code"] for e in refused.json()["error"]["details"]["errors"]}
    assert preview.status_code == 200
    images = [w["image"] for plan in preview.json()["plan"] for w in plan["workers"]]
    assert "registry.example.com/rlinf:[redacted]" in images
    assert token not in preview.text
    assert token not in refused.text
