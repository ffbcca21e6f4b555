"""oci.pack writes an OCI image layout whose documents and blobs agree, the way `ctr images import` reads it."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from rlark_devinfra.k8s import oci

pytestmark = pytest.mark.unit

REF = "rlark.local/tiny:1.2"


def _rootfs(tmp_path: Path) -> Path:
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "bin" / "hello").write_bytes(b"#!/bin/sh\necho hello\n")
    (rootfs / "bin" / "hello").chmod(0o755)
    (rootfs / "etc").mkdir()
    (rootfs / "etc" / "motd").write_text("tiny\n")
    return rootfs


def _members(tar_path: Path) -> dict[str, bytes]:
    with tarfile.open(tar_path) as archive:
        return {
            m.name: archive.extractfile(m).read()  # type: ignore[union-attr]
            for m in archive.getmembers()
            if m.isfile()
        }


def _blob(members: dict[str, bytes], descriptor: dict[str, Any]) -> bytes:
    algorithm, hexdigest = descriptor["digest"].split(":")
    assert algorithm == "sha256"
    data = members[f"blobs/sha256/{hexdigest}"]
    assert hashlib.sha256(data).hexdigest() == hexdigest
    assert len(data) == descriptor["size"]
    return data


@pytest.fixture
def packed(tmp_path: Path) -> tuple[str, dict[str, bytes], Path]:
    out = tmp_path / "images" / "tiny-oci.tar"
    digest = oci.pack(_rootfs(tmp_path), REF, out, entrypoint=["/bin/hello"], env=["PATH=/bin", "A=b"])
    return digest, _members(out), out


def test_index_names_the_image_and_points_at_the_returned_manifest(
    packed: tuple[str, dict[str, bytes], Path],
) -> None:
    digest, members, _ = packed
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(members["index.json"])
    assert index["schemaVersion"] == 2
    [entry] = index["manifests"]
    assert entry["digest"] == digest
    assert entry["mediaType"] == oci.MANIFEST_MEDIA_TYPE
    assert entry["annotations"] == {
        "io.containerd.image.name": REF,
        "org.opencontainers.image.ref.name": "1.2",
    }
    assert entry["platform"] == {"architecture": oci.architecture(), "os": "linux"}
    _blob(members, entry)


def test_manifest_config_and_layer_digests_and_sizes_agree(
    packed: tuple[str, dict[str, bytes], Path],
) -> None:
    _, members, _ = packed
    [entry] = json.loads(members["index.json"])["manifests"]
    manifest = json.loads(_blob(members, entry))
    assert manifest["mediaType"] == oci.MANIFEST_MEDIA_TYPE
    config = json.loads(_blob(members, manifest["config"]))
    [layer_descriptor] = manifest["layers"]
    assert layer_descriptor["mediaType"] == oci.LAYER_MEDIA_TYPE
    layer = _blob(members, layer_descriptor)
    # Uncompressed: the diff_id is the layer's own digest.
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer_descriptor["digest"]]}
    assert config["config"]["Entrypoint"] == ["/bin/hello"]
    assert config["config"]["Cmd"] is None
    assert config["config"]["Env"] == ["PATH=/bin", "A=b"]
    assert layer
    assert len(members) == 5  # oci-layout, index.json and the three blobs: nothing else


def test_layer_holds_the_rootfs_files(packed: tuple[str, dict[str, bytes], Path]) -> None:
    digest, members, _ = packed
    manifest = json.loads(members[f"blobs/sha256/{digest.removeprefix('sha256:')}"])
    layer = members[f"blobs/sha256/{manifest['layers'][0]['digest'].removeprefix('sha256:')}"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as archive:
        files = {m.name.removeprefix("./"): m for m in archive.getmembers()}
        assert archive.extractfile(files["etc/motd"]).read() == b"tiny\n"  # type: ignore[union-attr]
    assert files["bin/hello"].mode & 0o777 == 0o755
    assert files["bin"].isdir()


def test_default_env_and_latest_tag_and_no_leftovers(tmp_path: Path) -> None:
    out = tmp_path / "out.tar"
    oci.pack(_rootfs(tmp_path), "example.local/bare", out, cmd=["/bin/sh"])
    members = _members(out)
    [entry] = json.loads(members["index.json"])["manifests"]
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "latest"
    manifest = json.loads(_blob(members, entry))
    config = json.loads(_blob(members, manifest["config"]))
    assert config["config"]["Env"] == list(oci.DEFAULT_ENV)
    assert config["config"]["Cmd"] == ["/bin/sh"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tar", "rootfs"]


def test_ref_tag_ignores_a_registry_port() -> None:
    assert oci.ref_tag("localhost:5000/pause") == "latest"
    assert oci.ref_tag("localhost:5000/pause:3.10") == "3.10"


def test_an_image_on_a_base_keeps_the_bases_layers_and_settings_below_its_own(
    packed: tuple[str, dict[str, bytes], Path], tmp_path: Path
) -> None:
    _, base_members, base = packed
    extra = tmp_path / "extra"
    (extra / "opt").mkdir(parents=True)
    (extra / "opt" / "tool").write_text("on top\n")
    out = tmp_path / "on-base.tar"
    oci.pack(extra, "rlark.local/on-base:1", out, base=base)
    members = _members(out)
    [entry] = json.loads(members["index.json"])["manifests"]
    manifest = json.loads(_blob(members, entry))
    config = json.loads(_blob(members, manifest["config"]))
    [base_entry] = json.loads(base_members["index.json"])["manifests"]
    [base_layer] = json.loads(_blob(base_members, base_entry))["layers"]
    bottom, top = manifest["layers"]
    assert bottom == base_layer  # the same blob: containerd stores it once
    assert _blob(members, bottom) == _blob(base_members, base_layer)
    assert config["rootfs"]["diff_ids"] == [bottom["digest"], top["digest"]]
    assert (config["config"]["Entrypoint"], config["config"]["Env"]) == (["/bin/hello"], ["PATH=/bin", "A=b"])
    with tarfile.open(fileobj=io.BytesIO(_blob(members, top))) as archive:
        assert {m.name.removeprefix("./") for m in archive.getmembers()} >= {"opt/tool"}
