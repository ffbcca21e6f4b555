"""Pack a root filesystem directory as a single-layer OCI image-layout tarball.

The real kubelets of the test bed pull no image from a registry: containerd gets its images with
``ctr -n k8s.io images import <tar>``, which reads an OCI image layout (``oci-layout``, ``index.json``,
``blobs/sha256/…``). Written by hand rather than with a container tool because there is no Docker (or
buildah, skopeo) on these machines, and the format is four small JSON documents — layout marker, index,
manifest, config — around one layer tar.

The layer is the rootfs as an uncompressed tar with numeric owners, xattrs and ACLs (GNU ``tar``, which
keeps device nodes, hard links and file capabilities of a debootstrapped tree). Uncompressed, the layer's
digest is also its ``diff_id``, and import does not pay for a decompression. ``index.json`` names the image
by the containerd annotation ``io.containerd.image.name`` (the full reference) and the OCI one
``org.opencontainers.image.ref.name`` (the tag).

Nothing here runs at import time; :func:`pack` writes a temporary name beside ``out`` and renames it when
complete, so a reader never sees a partial tarball.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
"""The image environment when the caller gives none (what a Debian shell would have)."""

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"

_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def architecture() -> str:
    """This machine's architecture in OCI (Go) spelling: the images hold binaries built here."""
    machine = platform.machine().lower()
    return _GOARCH.get(machine, machine)


def ref_tag(ref: str) -> str:
    """The tag of an image reference (``rlark.local/pause:3.10`` → ``3.10``; none → ``latest``)."""
    last = ref.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else "latest"


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _put_json(blobs: Path, document: dict[str, Any]) -> tuple[str, int]:
    data = json.dumps(document).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return digest, len(data)


def pack(
    rootfs: Path,
    ref: str,
    out: Path,
    *,
    entrypoint: list[str] | None = None,
    cmd: list[str] | None = None,
    env: list[str] | None = None,
    base: Path | None = None,
) -> str:
    """Write ``rootfs`` as the OCI image ``ref`` to the tarball ``out``; return the manifest digest.

    ``env`` replaces :data:`DEFAULT_ENV` (or ``base``'s) when given (so it should carry ``PATH``). With
    ``base`` (another tarball of this module), the image is ``base``'s layers and ``rootfs`` as one more on
    top: containerd stores a layer it already has once, so importing the new image adds only ``rootfs``.
    The scratch blobs go to a temporary directory beside ``out`` (same filesystem: the layer is moved, not
    copied), removed on success and on failure.
    """
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        blobs = work / "blobs" / "sha256"
        blobs.mkdir(parents=True)

        below: list[str] = []  # the base's layer digests, bottom first
        inherited: dict[str, Any] = {}
        if base is not None:
            below, inherited = _take_layers(base, blobs)
        layer = work / "layer.tar"
        subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "--acls", "-C", str(rootfs), "-cf", str(layer), "."],
            check=True,
        )
        layer_digest = _sha256_file(layer)
        layer.rename(blobs / layer_digest)

        arch = architecture()
        config = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "architecture": arch,
            "os": "linux",
            "config": {
                "Env": list(env) if env is not None else inherited.get("Env", list(DEFAULT_ENV)),
                "Entrypoint": entrypoint if entrypoint is not None else inherited.get("Entrypoint"),
                "Cmd": cmd if cmd is not None else inherited.get("Cmd"),
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in [*below, layer_digest]]},
            "history": [{"created_by": "rlark_devinfra.k8s.oci.pack"}],
        }
        config_digest, config_size = _put_json(blobs, config)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {
                "mediaType": CONFIG_MEDIA_TYPE,
                "digest": f"sha256:{config_digest}",
                "size": config_size,
            },
            "layers": [
                {
                    "mediaType": LAYER_MEDIA_TYPE,
                    "digest": f"sha256:{digest}",
                    "size": (blobs / digest).stat().st_size,
                }
                for digest in [*below, layer_digest]
            ],
        }
        manifest_digest, manifest_size = _put_json(blobs, manifest)
        index = {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [
                {
                    "mediaType": MANIFEST_MEDIA_TYPE,
                    "digest": f"sha256:{manifest_digest}",
                    "size": manifest_size,
                    "annotations": {
                        "io.containerd.image.name": ref,
                        "org.opencontainers.image.ref.name": ref_tag(ref),
                    },
                    "platform": {"architecture": arch, "os": "linux"},
                }
            ],
        }
        (work / "index.json").write_text(json.dumps(index))
        (work / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))

        partial = work / "image.tar"
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as archive:
            for name in ("oci-layout", "index.json"):
                archive.add(work / name, arcname=name)
            archive.add(work / "blobs", arcname="blobs", recursive=False)
            archive.add(blobs, arcname="blobs/sha256", recursive=False)
            for blob in sorted(blobs.iterdir()):
                archive.add(blob, arcname=f"blobs/sha256/{blob.name}")
        os.chmod(partial, 0o644)
        partial.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return f"sha256:{manifest_digest}"


def _take_layers(base: Path, blobs: Path) -> tuple[list[str], dict[str, Any]]:
    """Copy ``base``'s layer blobs into ``blobs``; return their digests (bottom first) and its image config."""
    with tarfile.open(base) as archive:

        def document(name: str) -> dict[str, Any]:
            member = archive.extractfile(name)
            assert member is not None, f"{base}: no {name}"
            found: dict[str, Any] = json.loads(member.read())
            return found

        manifest_digest = document("index.json")["manifests"][0]["digest"].removeprefix("sha256:")
        manifest = document(f"blobs/sha256/{manifest_digest}")
        config = document(f"blobs/sha256/{manifest['config']['digest'].removeprefix('sha256:')}")
        digests = [layer["digest"].removeprefix("sha256:") for layer in manifest["layers"]]
        for digest in digests:
            source = archive.extractfile(f"blobs/sha256/{digest}")
            assert source is not None
            with source, (blobs / digest).open("wb") as target:
                shutil.copyfileobj(source, target, 1 << 20)
    inherited: dict[str, Any] = config.get("config") or {}
    return digests, inherited
