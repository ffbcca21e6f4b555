"""Job templates: ready-made job documents the console and the CLI start from.

Role: turn a few parameters (clusters, image, GPUs, node counts) into a complete
:class:`~rlark_scheduler.domain.document.model.JobDocument` that passes validation when the clusters can hold
it. A template is a starting point, not a constraint: the built document is edited and validated
like any other, and ``spec.type: template`` with ``spec.template: <id>`` only records its origin.

Every cluster parameter may be left out, and is by default: the role then names no cluster and the
scheduler chooses (ADR 0026) — one cluster that fits the whole job, or the clusters a network domain joins.

Templates:
- ``single-node``: one role ``worker``, the Header, on one node (the user guide's single-node task);
- ``rl-actor-rollout``: an ``actor`` Header on one node and ``rollout`` on N nodes;
- ``rl-actor-rollout-env``: ``actor`` Header on one node, ``rollout`` on N nodes and ``env`` on M
  nodes, each role with its own (optional) cluster parameter.

The multi-role templates fill ``spec.rlinfConfig.cluster`` consistently with the roles: RLinf's
``num_nodes`` equals the worker count, one ``node_groups`` entry per role over that role's node
ranks (the Header is rank 0, then roles in order), and a ``component_placement`` giving each
component all the GPUs of its group (its nodes when the role has no GPU).

Parameters are validated strictly (unknown names refused) and accepted in camelCase or snake_case;
a bad parameter raises :class:`~rlark_scheduler.domain.document.errors.SpecParseError` with field paths.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from rlark_scheduler.domain.document.errors import SpecError, SpecParseError
from rlark_scheduler.domain.document.fields import child_path
from rlark_scheduler.domain.document.model import MAX_REPLICAS, JobDocument, JobType

DEFAULT_RUN_SCRIPT = "python train.py\n"


class TemplateParams(BaseModel):
    """Parameters every template takes."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        frozen=True,
    )

    name: str | None = Field(default=None, description="Display name; the template title if unset")
    image: str = Field(description="Worker image with an explicit tag or digest")
    gpus_per_worker: int = Field(default=8, ge=0, le=64, description="GPUs of every worker")
    run_script: str = Field(default=DEFAULT_RUN_SCRIPT, description="Run on the Header")
    prepare_script: str | None = Field(default=None, description="Run on every worker first")
    ssh_keys: list[str] = Field(default_factory=list, description="Names of SSH public keys")
    max_restarts: int = Field(
        default=0,
        ge=0,
        le=100,
        description="New attempts after a worker, node, eviction, OOM or tunnel failure "
        "(spec.restartPolicy.maxRestarts; 0: none)",
    )


ANY_CLUSTER = "left out: any cluster, the scheduler chooses (ADR 0026)"


class SingleNodeParams(TemplateParams):
    cluster: str | None = Field(default=None, description=f"Cluster of the single worker; {ANY_CLUSTER}")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node labels")


class ActorRolloutParams(TemplateParams):
    actor_cluster: str | None = Field(
        default=None, description=f"Cluster of the actor (the Header); {ANY_CLUSTER}"
    )
    rollout_cluster: str | None = Field(
        default=None, description=f"Cluster of the rollout workers; {ANY_CLUSTER}"
    )
    rollout_nodes: int = Field(default=1, ge=1, le=MAX_REPLICAS, description="Rollout nodes")


class ActorRolloutEnvParams(ActorRolloutParams):
    env_cluster: str | None = Field(default=None, description=f"Cluster of the env workers; {ANY_CLUSTER}")
    env_nodes: int = Field(default=1, ge=1, le=MAX_REPLICAS, description="Env nodes")


P = TypeVar("P", bound=TemplateParams)


@dataclass(frozen=True)
class Template(Generic[P]):
    """One template: its texts in both console languages and how to build a document."""

    id: str
    title_en: str
    title_zh: str
    description_en: str
    description_zh: str
    params_model: type[P]
    builder: Callable[[str, P], dict[str, Any]]

    def build(self, params: Mapping[str, Any]) -> JobDocument:
        """The job document for ``params`` (see the params model for names and defaults)."""
        try:
            parsed = self.params_model.model_validate(dict(params))
        except ValidationError as exc:
            raise SpecParseError(_param_errors(exc)) from None
        document = self.builder(self.id, parsed)
        return JobDocument.model_validate(document)

    def params_schema(self) -> dict[str, Any]:
        """JSON schema of the parameters (camelCase names), for forms and ``--help``."""
        return self.params_model.model_json_schema(by_alias=True)


def _param_errors(exc: ValidationError) -> list[SpecError]:
    errors: list[SpecError] = []
    for error in exc.errors(include_url=False, include_input=False):
        path = "params"
        for part in error["loc"]:
            path = child_path(path, part)
        errors.append(SpecError("template_param_invalid", f"{path}: {error['msg']}", path))
    return errors


def _role(
    name: str, cluster: str | None, replicas: int, params: TemplateParams, selector: dict[str, str]
) -> dict[str, Any]:
    role: dict[str, Any] = {
        "name": name,
        **({"cluster": cluster} if cluster else {}),
        "nodeSelector": dict(selector),
        "replicas": replicas,
        "gpusPerWorker": params.gpus_per_worker,
        "image": params.image,
    }
    if params.prepare_script is not None:
        role["prepareScript"] = params.prepare_script
    return role


def _document(
    template_id: str,
    title: str,
    params: TemplateParams,
    header: str,
    roles: list[dict[str, Any]],
    rlinf: dict[str, Any],
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": JobType.TEMPLATE.value,
        "template": template_id,
        "header": header,
        "sshKeys": list(params.ssh_keys),
        "runScript": params.run_script,
        "rlinfConfig": rlinf,
        "tasks": roles,
    }
    if params.max_restarts:
        spec["restartPolicy"] = {"maxRestarts": params.max_restarts}
    return {"metadata": {"name": params.name or title}, "spec": spec}


def _ranks(first: int, count: int) -> str:
    return f"{first}-{first + count - 1}"


def rlinf_cluster_section(roles: Sequence[tuple[str, int, int]]) -> dict[str, Any]:
    """RLinf's ``cluster`` section for roles given in rank order as (name, node count, GPUs per worker).

    ``num_nodes`` is the worker count; one ``node_groups`` entry per role over its node ranks (the Header
    first, rank 0, then the roles in order — the numbering of ``RLINF_NODE_RANK``); a
    ``component_placement`` giving each component every GPU of its group, or its nodes when the role has
    no GPU. The console's wizard recomputes the same section when node counts or GPUs change
    (``web/src/pages/jobs/wizard/rlinf.ts``); ``web/src/test/fixtures/rlinf-cluster-cases.json``, written
    from this function and checked by tests on both sides, keeps the two equal.
    """
    node_groups: list[dict[str, Any]] = []
    placement: dict[str, Any] = {}
    next_rank = 0
    for label, nodes, gpus_per_worker in roles:
        if nodes < 1:
            continue
        node_groups.append({"label": label, "node_ranks": _ranks(next_rank, nodes)})
        resources = nodes * gpus_per_worker if gpus_per_worker else nodes
        placement[label] = {"node_group": label, "placement": _ranks(0, resources)}
        next_rank += nodes
    return {
        "cluster": {
            "num_nodes": next_rank,
            "component_placement": placement,
            "node_groups": node_groups,
        }
    }


def _single_node(template_id: str, params: SingleNodeParams) -> dict[str, Any]:
    role = _role("worker", params.cluster, 1, params, params.node_selector)
    rlinf = {"cluster": {"num_nodes": 1}}
    return _document(template_id, "single-node job", params, "worker", [role], rlinf)


def _actor_rollout(template_id: str, params: ActorRolloutParams) -> dict[str, Any]:
    roles = [
        _role("actor", params.actor_cluster, 1, params, {}),
        _role("rollout", params.rollout_cluster, params.rollout_nodes, params, {}),
    ]
    gpus = params.gpus_per_worker
    rlinf = rlinf_cluster_section([("actor", 1, gpus), ("rollout", params.rollout_nodes, gpus)])
    return _document(template_id, "actor + rollout", params, "actor", roles, rlinf)


def _actor_rollout_env(template_id: str, params: ActorRolloutEnvParams) -> dict[str, Any]:
    roles = [
        _role("actor", params.actor_cluster, 1, params, {}),
        _role("rollout", params.rollout_cluster, params.rollout_nodes, params, {}),
        _role("env", params.env_cluster, params.env_nodes, params, {}),
    ]
    gpus = params.gpus_per_worker
    rlinf = rlinf_cluster_section(
        [("actor", 1, gpus), ("rollout", params.rollout_nodes, gpus), ("env", params.env_nodes, gpus)]
    )
    return _document(template_id, "actor + rollout + env", params, "actor", roles, rlinf)


SINGLE_NODE: Template[SingleNodeParams] = Template(
    id="single-node",
    title_en="Single node",
    title_zh="单节点任务",
    description_en=(
        "One role named worker on one node; it is the Header, starts the Ray head and runs the run script."
    ),
    description_zh="一个名为 worker 的角色，占用 1 个节点；它是 Header，启动 Ray head 并执行运行脚本。",
    params_model=SingleNodeParams,
    builder=_single_node,
)

RL_ACTOR_ROLLOUT: Template[ActorRolloutParams] = Template(
    id="rl-actor-rollout",
    title_en="RL: actor + rollout",
    title_zh="强化学习：actor + rollout",
    description_en=(
        "An actor Header on one node and rollout workers on N nodes, possibly in another "
        "cluster; RLinf num_nodes, node groups and placement are filled to match."
    ),
    description_zh=(
        "actor 作为 Header 占用 1 个节点，rollout 占用 N 个节点（可在另一个集群）；"
        "RLinf 的 num_nodes、节点组与放置策略会自动保持一致。"
    ),
    params_model=ActorRolloutParams,
    builder=_actor_rollout,
)

RL_ACTOR_ROLLOUT_ENV: Template[ActorRolloutEnvParams] = Template(
    id="rl-actor-rollout-env",
    title_en="RL: actor + rollout + env",
    title_zh="强化学习：actor + rollout + env",
    description_en=(
        "An actor Header on one node, rollout workers on N nodes and env workers on M nodes, "
        "each role on its own cluster; RLinf num_nodes, node groups and placement are filled "
        "to match."
    ),
    description_zh=(
        "actor 作为 Header 占用 1 个节点，rollout 占用 N 个节点，env 占用 M 个节点，"
        "每个角色可选各自的集群；RLinf 的 num_nodes、节点组与放置策略会自动保持一致。"
    ),
    params_model=ActorRolloutEnvParams,
    builder=_actor_rollout_env,
)

TEMPLATES: Mapping[str, Template[Any]] = {
    template.id: template for template in (SINGLE_NODE, RL_ACTOR_ROLLOUT, RL_ACTOR_ROLLOUT_ENV)
}
"""Every template by id, in the order the console lists them."""
