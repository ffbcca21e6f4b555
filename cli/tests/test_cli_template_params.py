"""``rlark jobs init --param``: values read by the template's parameter schema — the scheduler's
real schemas, as ``GET /api/v1/templates`` serves them."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_cli.template_params import ParamError, params_from
from rlark_scheduler.domain.templates import TEMPLATES


def schema(template: str) -> dict[str, Any]:
    return TEMPLATES[template].params_schema()


def test_a_list_parameter_takes_a_comma_separated_list() -> None:
    assert params_from(["sshKeys=laptop, desk,"], schema("single-node")) == {"sshKeys": ["laptop", "desk"]}
    assert params_from(["sshKeys=laptop"], schema("single-node")) == {"sshKeys": ["laptop"]}


def test_a_list_parameter_still_takes_a_json_list() -> None:
    assert params_from(['sshKeys=["a,b", "c"]'], schema("single-node")) == {"sshKeys": ["a,b", "c"]}


def test_a_broken_json_list_is_refused_naming_the_parameter() -> None:
    with pytest.raises(ParamError, match=r"--param sshKeys: .*not valid JSON"):
        params_from(['sshKeys=["laptop"'], schema("single-node"))


def test_a_mapping_takes_key_value_pairs_or_json() -> None:
    got = params_from(["nodeSelector=rlark.io/gpu-model=A100,zone=b"], schema("single-node"))
    assert got == {"nodeSelector": {"rlark.io/gpu-model": "A100", "zone": "b"}}
    assert params_from(['nodeSelector={"a": "1"}'], schema("single-node")) == {"nodeSelector": {"a": "1"}}
    with pytest.raises(ParamError, match="--param nodeSelector: expected key=value"):
        params_from(["nodeSelector=A100"], schema("single-node"))


def test_numbers_must_be_numbers_and_strings_stay_strings() -> None:
    got = params_from(["rolloutNodes=4", "actorCluster=7"], schema("rl-actor-rollout"))
    assert got == {"rolloutNodes": 4, "actorCluster": "7"}
    with pytest.raises(ParamError, match="--param rolloutNodes: expected a whole number, got 'four'"):
        params_from(["rolloutNodes=four"], schema("rl-actor-rollout"))


def test_snake_case_names_are_the_schema_names() -> None:
    assert params_from(["ssh_keys=a,b"], schema("single-node")) == {"sshKeys": ["a", "b"]}


def test_an_unknown_parameter_is_refused_with_the_template_parameters() -> None:
    with pytest.raises(
        ParamError, match=r"--param sshkey: this template has no such parameter \(it takes: .*sshKeys"
    ):
        params_from(["sshkey=laptop"], schema("single-node"))
    with pytest.raises(ParamError, match="is not key=value"):
        params_from(["laptop"], schema("single-node"))


def test_the_values_render_a_valid_document() -> None:
    values = params_from(
        ["cluster=gpu-a", "image=r/rlinf:v1", "sshKeys=laptop,desk", "nodeSelector=rlark.io/gpu-model=A100"],
        schema("single-node"),
    )
    document = TEMPLATES["single-node"].build(values)
    assert document.spec.ssh_keys == ["laptop", "desk"]
