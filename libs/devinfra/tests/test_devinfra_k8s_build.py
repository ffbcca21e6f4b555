"""The generated Go module pins every staging module of k8s.io/kubernetes, from its own go.mod."""

from __future__ import annotations

import pytest
from rlark_devinfra.k8s.build import godebug_lines, staging_replaces

pytestmark = pytest.mark.unit

GOMOD = """module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
\tgithub.com/blang/semver/v4 v4.0.0
\tk8s.io/api v0.0.0
\tk8s.io/apimachinery v0.0.0
\tk8s.io/kube-openapi v0.0.0-20250910181357-589584f1c912
)

require (
\tk8s.io/cri-client v0.0.0 // indirect
\tk8s.io/kms v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
)
"""


def test_every_v0_0_0_requirement_gets_a_replace_to_the_matching_staging_release() -> None:
    assert staging_replaces(GOMOD, "v1.36.3") == [
        "replace k8s.io/api => k8s.io/api v0.36.3",
        "replace k8s.io/apimachinery => k8s.io/apimachinery v0.36.3",
        "replace k8s.io/cri-client => k8s.io/cri-client v0.36.3",
        "replace k8s.io/kms => k8s.io/kms v0.36.3",
    ]


def test_pseudo_versions_are_not_staging_modules_and_the_minor_follows_the_tag() -> None:
    replaces = staging_replaces(GOMOD, "v1.37.2")
    assert not any("kube-openapi" in line for line in replaces)
    assert "replace k8s.io/api => k8s.io/api v0.37.2" in replaces


def test_the_godebug_directive_is_copied() -> None:
    assert godebug_lines(GOMOD) == ["godebug default=go1.26"]
    block = "module x\n\ngodebug (\n\tdefault=go1.26\n\twinsymlink=0\n)\n"
    assert godebug_lines(block) == ["godebug (\n\tdefault=go1.26\n\twinsymlink=0\n)"]
