#!/usr/bin/env python3
"""Pack a root filesystem directory as a single-layer OCI image-layout tarball for ``ctr images import``.

usage: mkoci.py ROOTFS_DIR IMAGE_REF OUT_TAR [--entrypoint JSON] [--cmd JSON] [--env K=V ...] [--gzip]

Hand-written: no Docker here, and the layout is four small JSON documents around one layer tar.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def sha_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def put_blob(blobs: Path, document: dict[str, Any]) -> tuple[str, int]:
    data = json.dumps(document).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return digest, len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rootfs")
    parser.add_argument("ref")
    parser.add_argument("out")
    parser.add_argument("--entrypoint", default="null")
    parser.add_argument("--cmd", default="null")
    parser.add_argument("--env", action="append", default=[DEFAULT_PATH])
    parser.add_argument("--gzip", action="store_true")
    args = parser.parse_args()

    out = Path(args.out).resolve()
    work = Path(tempfile.mkdtemp(prefix="oci-", dir=out.parent))
    blobs = work / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    # The layer: a tar of the rootfs with numeric owners (xattrs kept); uncompressed, diff_id == digest.
    layer = work / "layer.tar"
    tar = ["tar", "--numeric-owner", "--xattrs", "--acls", "-C", args.rootfs, "-cf", str(layer), "."]
    subprocess.run(tar, check=True)
    diff_id = sha_file(layer)
    media = "application/vnd.oci.image.layer.v1.tar"
    if args.gzip:
        subprocess.run(["gzip", "-1", str(layer)], check=True)
        layer = layer.with_name("layer.tar.gz")
        media += "+gzip"
    layer_digest, layer_size = sha_file(layer), layer.stat().st_size
    shutil.move(layer, blobs / layer_digest)

    config = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": args.env,
            "Entrypoint": json.loads(args.entrypoint),
            "Cmd": json.loads(args.cmd),
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": "rlark realpods mkoci.py"}],
    }
    config_digest, config_size = put_blob(blobs, config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": f"sha256:{config_digest}",
            "size": config_size,
        },
        "layers": [{"mediaType": media, "digest": f"sha256:{layer_digest}", "size": layer_size}],
    }
    manifest_digest, manifest_size = put_blob(blobs, manifest)
    tag = args.ref.rsplit(":", 1)[1] if ":" in args.ref.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": f"sha256:{manifest_digest}",
                "size": manifest_size,
                "annotations": {
                    "io.containerd.image.name": args.ref,
                    "org.opencontainers.image.ref.name": tag,
                },
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        ],
    }
    (work / "index.json").write_text(json.dumps(index))
    (work / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    subprocess.run(["tar", "-C", str(work), "-cf", str(out), "oci-layout", "index.json", "blobs"], check=True)
    shutil.rmtree(work)
    print(f"{out}: {args.ref} layer={layer_size} bytes manifest=sha256:{manifest_digest}")


if __name__ == "__main__":
    main()
