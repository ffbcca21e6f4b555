"""Reading job documents: YAML, JSON and mappings, strictness, error positions, derived facts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rlark_scheduler.domain.document.errors import SpecParseError
from rlark_scheduler.domain.document.facts import fill_network_domain_default, rank_ranges, worker_slots
from rlark_scheduler.domain.document.fields import child_path, parent_path
from rlark_scheduler.domain.document.model import (
    API_VERSION,
    NO_NETWORK_DOMAIN,
    JobDocument,
    JobType,
    MountType,
)
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.reader import MAX_DOCUMENT_CHARS, MAX_NESTING_DEPTH

GUIDE_EXAMPLE = """\
apiVersion: rlark.io/v1
kind: Job
metadata:
  name: "grpo math 7B"
spec:
  type: custom
  header: actor
  networkDomain: dom-a
  sshKeys: [my-workstation]
  runScript: |
    python train.py
  tensorboardDir: /data/outputs/tb
  outputs: [/data/outputs]
  priority: 0
  tasks:
    - name: actor
      cluster: gpu-a
      nodeSelector: {rlark.io/gpu-model: A100}
      replicas: 1
      gpusPerWorker: 8
      image: registry.example.com/rlinf:v0.3.0-cuda12.4
      prepareScript: |
        source /opt/venv/rlinf/bin/activate
      mounts:
        - {name: data, type: hostPath, source: /mnt/data, path: /data, readOnly: false}
      env: {NCCL_DEBUG: INFO}
"""


def _errors(source: str | dict[str, Any]) -> list[tuple[str, str, int | None]]:
    with pytest.raises(SpecParseError) as caught:
        parse_job_document(source)
    return [(e.code, e.field, e.line) for e in caught.value.errors]


def _minimal(**spec: Any) -> dict[str, Any]:
    role = {"name": "worker", "cluster": "c", "image": "img:1"}
    return {"metadata": {"name": "job"}, "spec": {"header": "worker", "tasks": [role], **spec}}


def test_guide_example_parses_into_typed_fields() -> None:
    doc = parse_job_document(GUIDE_EXAMPLE)
    role = doc.spec.tasks[0]
    assert doc.metadata.name == "grpo math 7B"
    assert doc.spec.type is JobType.CUSTOM
    assert doc.spec.network_domain == "dom-a"
    assert doc.spec.run_script == "python train.py\n"
    assert role.node_selector == {"rlark.io/gpu-model": "A100"}
    assert role.gpus_per_worker == 8
    assert role.mounts[0].type is MountType.HOST_PATH
    assert role.prepare_script == "source /opt/venv/rlinf/bin/activate\n"
    assert role.env == {"NCCL_DEBUG": "INFO"}


def test_json_text_and_mapping_give_the_same_document_as_yaml() -> None:
    from_yaml = parse_job_document(GUIDE_EXAMPLE)
    data = from_yaml.model_dump(mode="json")
    assert parse_job_document(json.dumps(data)) == from_yaml
    assert parse_job_document(data) == from_yaml
    assert parse_job_document(GUIDE_EXAMPLE.encode()) == from_yaml


def test_snake_case_keys_are_accepted_and_defaults_filled() -> None:
    doc = parse_job_document(
        {
            "metadata": {"name": "x"},
            "spec": {
                "header": "w",
                "run_script": "true",
                "tasks": [{"name": "w", "cluster": "c", "image": "i:1", "gpus_per_worker": 2}],
            },
        }
    )
    assert (doc.api_version, doc.kind) == (API_VERSION, "Job")
    assert doc.spec.run_script == "true"
    role = doc.spec.tasks[0]
    assert (role.gpus_per_worker, role.replicas, role.mounts, role.env) == (2, 1, [], {})


def test_yaml_numbers_and_booleans_become_strings_in_env_selector_and_name() -> None:
    doc = parse_job_document(
        "metadata: {name: 2024}\n"
        "spec:\n"
        "  tasks:\n"
        "    - name: w\n      cluster: c\n      image: i:1\n"
        "      nodeSelector: {gpu-count: 8}\n"
        "      env: {OMP_NUM_THREADS: 4, USE_X: true, RATIO: 0.5}\n"
    )
    assert doc.metadata.name == "2024"
    assert doc.spec.tasks[0].node_selector == {"gpu-count": "8"}
    assert doc.spec.tasks[0].env == {"OMP_NUM_THREADS": "4", "USE_X": "true", "RATIO": "0.5"}


def test_yaml_syntax_error_names_line_and_column() -> None:
    with pytest.raises(SpecParseError) as caught:
        parse_job_document("metadata:\n  name: x\nspec: [1,\n  tasks: 2\n")
    error = caught.value.errors[0]
    assert error.code == "yaml_syntax"
    assert error.line is not None
    assert error.line >= 3
    assert error.column is not None
    assert f"line {error.line}" in error.message


def test_unknown_key_is_refused_with_its_path_and_line() -> None:
    text = "metadata:\n  name: x\nspec:\n  tasks:\n    - name: w\n      cluster: c\n"
    text += "      image: i:1\n      gpus: 8\n"
    assert ("field_unknown", "spec.tasks[0].gpus", 8) in _errors(text)


def _messages(source: str | dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(SpecParseError) as caught:
        parse_job_document(source)
    return {e.field: e.message for e in caught.value.errors}


def test_a_misspelt_field_is_named_with_the_field_it_is_closest_to_in_its_own_object() -> None:
    mount = {"name": "m", "type": "hostPath", "source": "/a", "path": "/b", "readonly": True}
    role = {"name": "worker", "cluster": "c", "image": "img:1", "replica": 2, "mounts": [mount], "zzz": 1}
    said = _messages(_minimal(tasks=[role], runScrpt="x", restartPolicy={"maxRestart": 1}))
    assert said["spec.runScrpt"] == "spec.runScrpt is not a known field; did you mean runScript?"
    assert said["spec.restartPolicy.maxRestart"].endswith("did you mean maxRestarts?")
    assert said["spec.tasks[0].replica"].endswith("did you mean replicas?")
    assert said["spec.tasks[0].mounts[0].readonly"].endswith("did you mean readOnly?")
    assert said["spec.tasks[0].zzz"] == "spec.tasks[0].zzz is not a known field"
    assert (
        said["spec.tasks[0].replica"].render("zh-CN")
        == "spec.tasks[0].replica 不是已知字段；是否想写 replicas？"
    )


def test_a_wrong_type_is_a_catalogue_sentence_the_console_can_say_in_chinese() -> None:
    said = _messages(_minimal(tasks=[{"name": "w", "cluster": "c", "image": "i:1", "replicas": "two"}]))
    assert said["spec.tasks[0].replicas"] == "spec.tasks[0].replicas: Input should be a valid integer"
    assert said["spec.tasks[0].replicas"].render("zh-CN") == "spec.tasks[0].replicas：应为整数"


def test_every_schema_problem_is_reported_at_once() -> None:
    errors = _errors(
        {
            "metadata": {},
            "spec": {"tasks": [{"name": "w", "replicas": "two", "typo": 1}], "priority": 1.5},
        }
    )
    codes = {(code, field) for code, field, _ in errors}
    assert ("field_required", "metadata.name") in codes
    assert ("field_required", "spec.tasks[0].image") in codes
    assert ("field_invalid", "spec.tasks[0].replicas") in codes
    assert ("field_unknown", "spec.tasks[0].typo") in codes
    assert ("field_invalid", "spec.priority") in codes


def test_booleans_are_not_accepted_as_counts() -> None:
    assert ("field_invalid", "spec.tasks[0].replicas", None) in _errors(
        _minimal(tasks=[{"name": "w", "cluster": "c", "image": "i:1", "replicas": True}])
    )


def test_missing_field_error_points_at_the_enclosing_line() -> None:
    text = "metadata:\n  name: x\nspec:\n  tasks:\n    - name: w\n      cluster: c\n"
    assert ("field_required", "spec.tasks[0].image", 5) in _errors(text)


def test_duplicate_keys_are_refused_in_yaml_and_json() -> None:
    assert ("duplicate_key", "spec", 3) in _errors("metadata: {name: x}\nspec: {}\nspec: {}\n")
    json_errors = _errors('{"metadata": {"name": "x"},\n "spec": {}, "spec": {}}')
    assert [code for code, _, _ in json_errors] == ["duplicate_key"]


def test_yaml_aliases_are_refused() -> None:
    text = "metadata: {name: &n x}\nspec:\n  header: *n\n"
    assert ("yaml_alias_refused", "spec.header", 3) in _errors(text)


def test_several_documents_empty_documents_and_non_mappings_are_refused() -> None:
    assert _errors("metadata: {name: x}\n---\nspec: {}\n")[0][0] == "yaml_syntax"
    assert _errors("   \n")[0][0] == "document_empty"
    assert _errors("- a\n- b\n")[0][0] == "document_not_mapping"
    assert _errors(b"\xff\xfe")[0][0] == "encoding_invalid"


def test_oversized_documents_are_refused_before_parsing() -> None:
    text = "metadata: {name: x}\n#" + "x" * MAX_DOCUMENT_CHARS
    assert _errors(text)[0][0] == "document_too_large"


def test_source_lines_are_kept_for_text_and_absent_for_mappings() -> None:
    doc = parse_job_document(GUIDE_EXAMPLE)
    assert doc.source is not None
    assert doc.source.line_of("spec.tasks[0].image") == 21
    assert doc.source.line_of("spec.tasks[0].nodeSelector") == 18
    # a block scalar's first content line is the line after its key
    assert doc.source.line_in_value("spec.runScript", 1) == 11
    assert doc.source.field_at_line(23) == "spec.tasks[0].prepareScript"
    assert parse_job_document(doc.model_dump()).source is None


@pytest.mark.parametrize(
    ("parent", "key", "path"),
    [
        ("", "spec", "spec"),
        ("spec", "tasks", "spec.tasks"),
        ("spec.tasks", 2, "spec.tasks[2]"),
        (
            "spec.tasks[0].nodeSelector",
            "rlark.io/gpu-model",
            'spec.tasks[0].nodeSelector["rlark.io/gpu-model"]',
        ),
        ("a", 'we"ird]', 'a["we\\"ird]"]'),
    ],
)
def test_child_and_parent_paths_are_inverse(parent: str, key: str | int, path: str) -> None:
    assert child_path(parent, key) == path
    assert parent_path(path) == parent


def test_rank_order_puts_the_header_first_then_roles_in_spec_order() -> None:
    doc = parse_job_document(
        _minimal(
            header="actor",
            tasks=[
                {"name": "rollout", "cluster": "a", "image": "i:1", "replicas": 2, "gpusPerWorker": 4},
                {"name": "actor", "cluster": "b", "image": "i:2", "gpusPerWorker": 8},
                {"name": "env", "cluster": "a", "image": "i:1", "replicas": 3},
            ],
        )
    )
    ranges = [(r.role, r.first_rank, r.count) for r in rank_ranges(doc.spec)]
    assert ranges == [("actor", 0, 1), ("rollout", 1, 2), ("env", 3, 3)]
    slots = worker_slots(doc.spec)
    assert [(s.role, s.index, s.rank) for s in slots] == [
        ("actor", 0, 0),
        ("rollout", 0, 1),
        ("rollout", 1, 2),
        ("env", 0, 3),
        ("env", 1, 4),
        ("env", 2, 5),
    ]
    assert [s.is_header for s in slots] == [True] + [False] * 5
    assert (slots[0].gpus, slots[0].cluster) == (8, "b")


def test_worker_slots_refuse_invalid_replicas() -> None:
    doc = parse_job_document(_minimal(tasks=[{"name": "w", "cluster": "c", "image": "i:1", "replicas": 0}]))
    with pytest.raises(ValueError, match="replicas"):
        worker_slots(doc.spec)


def test_default_network_domain_is_the_first_by_name_and_keeps_the_source() -> None:
    doc = parse_job_document(GUIDE_EXAMPLE.replace("  networkDomain: dom-a\n", ""))
    assert doc.spec.network_domain is None
    filled = fill_network_domain_default(doc, ["zeta", "alpha", "mid"])
    assert filled.spec.network_domain == "alpha"
    assert filled.source is doc.source
    assert fill_network_domain_default(doc, []).spec.network_domain is None
    explicit = parse_job_document(GUIDE_EXAMPLE)
    assert fill_network_domain_default(explicit, ["alpha"]).spec.network_domain == "dom-a"


def test_network_domain_none_keeps_the_job_out_of_every_domain() -> None:
    doc = parse_job_document(GUIDE_EXAMPLE.replace("  networkDomain: dom-a\n", "  networkDomain: none\n"))
    assert doc.spec.network_domain == NO_NETWORK_DOMAIN
    filled = fill_network_domain_default(doc, ["alpha", "dom-a"])
    assert filled.spec.network_domain == NO_NETWORK_DOMAIN  # the normalised document keeps it
    assert filled.spec.joined_domain is None
    assert parse_job_document(GUIDE_EXAMPLE).spec.joined_domain == "dom-a"


def test_documents_are_immutable() -> None:
    doc: JobDocument = parse_job_document(GUIDE_EXAMPLE)
    with pytest.raises(ValueError, match="frozen"):
        doc.spec.priority = 5  # type: ignore[misc]


def test_yaml_tags_are_refused_naming_the_field_and_nothing_is_constructed() -> None:
    applied = "metadata: {name: x}\nspec: !!python/object/apply:os.system [touch /tmp/owned]\n"
    assert _errors(applied) == [("yaml_tag_refused", "spec", 2)]
    as_key = "metadata: {name: x}\nspec: {? !!python/object/apply:os.system [x] : 1}\n"
    assert _errors(as_key) == [("yaml_tag_refused", "spec", 2)]
    binary = "metadata: {name: x}\nspec:\n  rlinfConfig: {blob: !!binary aGk=}\n"
    assert _errors(binary) == [("yaml_tag_refused", "spec.rlinfConfig.blob", 3)]


def _nested(depth: int, json_style: bool) -> str:
    """A job document nesting ``depth`` collections in all: the document, spec, rlinfConfig, then more."""
    more = depth - 3
    if json_style:
        return '{"metadata": {"name": "x"}, "spec": {"rlinfConfig": {"a": ' + "[" * more + "]" * more + "}}}"
    block = "".join("  " * (2 + level) + "a:\n" for level in range(more))
    return "metadata: {name: x}\nspec:\n  rlinfConfig:\n" + block + "  " * (2 + more) + "a: 1\n"


@pytest.mark.parametrize("json_style", [True, False], ids=["json", "yaml-block"])
def test_nesting_up_to_the_limit_is_read_and_one_level_more_is_refused_naming_the_limit(
    json_style: bool,
) -> None:
    assert parse_job_document(_nested(MAX_NESTING_DEPTH, json_style)).spec.rlinf_config
    deeper = _nested(MAX_NESTING_DEPTH + 1, json_style)
    with pytest.raises(SpecParseError) as caught:
        parse_job_document(deeper)
    (error,) = caught.value.errors
    assert error.code == "document_too_deep"
    assert str(MAX_NESTING_DEPTH) in error.message
    assert error.line == len(deeper.splitlines())  # where the level too many starts


@pytest.mark.parametrize(
    "text",
    [
        '{"metadata": {"name": "x"}, "spec": {"rlinfConfig": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}}",
        '{"yaml": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "metadata: {name: x}\nspec:\n  rlinfConfig:\n    a: " + "[" * 50_000 + "]" * 50_000 + "\n",
        "metadata: {name: x}\nspec:\n  rlinfConfig:\n    a:\n      " + "- " * 50_000 + "x\n",
        "metadata: {name: x}\nspec: {rlinfConfig: {a: '\"', b: " + "{c: " * 20_000 + "}" * 20_000 + "}}\n",
    ],
    ids=["json", "json-wrapper", "yaml-flow", "yaml-block-sequences", "yaml-flow-after-a-quote"],
)
def test_hostile_nesting_is_a_depth_error_not_a_recursion_error(text: str) -> None:
    assert [code for code, _, _ in _errors(text)] == ["document_too_deep"]


def test_values_yaml_cannot_build_are_refused_at_their_line_and_field() -> None:
    digits = "1" * 5_000  # over Python's 4,300-digit limit for int()
    text = f"metadata: {{name: x}}\nspec:\n  rlinfConfig:\n    big: {digits}\n    day: 2024-13-45\n"
    assert _errors(text) == [("yaml_value_invalid", "spec.rlinfConfig.big", 4)]
    assert _errors(text.replace(digits, "1")) == [("yaml_value_invalid", "spec.rlinfConfig.day", 5)]
    as_json = '{"metadata": {"name": "x"},\n "spec": {"rlinfConfig": {"big": ' + digits + "}}}"
    assert _errors(as_json) == [("yaml_value_invalid", "spec.rlinfConfig.big", 2)]


def test_the_documented_restart_policy_with_its_on_key_is_read_as_written() -> None:
    doc = parse_job_document(
        "metadata: {name: x}\n"
        "spec:\n"
        "  restartPolicy: {maxRestarts: 2, on: [WorkerLost, NodeGone]}\n"
        "  tasks:\n"
        "    - {name: w, cluster: c, image: 'i:1', env: {VERBOSE: yes, LEGACY: off, STRICT: true}}\n"
    )
    assert doc.spec.restart_policy is not None
    assert doc.spec.restart_policy.on == ["WorkerLost", "NodeGone"]
    # YAML 1.2's booleans: only true and false; yes/no/on/off are the words written.
    assert doc.spec.tasks[0].env == {"VERBOSE": "yes", "LEGACY": "off", "STRICT": "true"}


def test_a_key_that_is_not_a_string_is_named_as_written_never_as_a_list_index() -> None:
    said = _messages(
        "metadata: {name: x}\n"
        "spec:\n"
        "  restartPolicy: {maxRestarts: 2, true: [WorkerLost]}\n"
        "  tasks:\n"
        "    - {name: w, cluster: c, image: 'i:1', env: {1: x}}\n"
    )
    assert said == {
        "spec.restartPolicy.true": "spec.restartPolicy.true: keys must be strings; put this key in quotes",
        'spec.tasks[0].env["1"]': 'spec.tasks[0].env["1"]: keys must be strings; put this key in quotes',
    }
    assert all("[1]" not in field for field in said)
