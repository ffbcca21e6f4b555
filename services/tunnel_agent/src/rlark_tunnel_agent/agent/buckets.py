"""What the agent reads of a bucket itself, over the S3 API: the objects below a prefix (ADR 0015 amendment).

Role: a resuming Header whose `spec.resume` directory lies in an objectStorage mount has its checkpoints in a
bucket, which the agent reads where it cannot see the mount (the mount exists only for a running worker, and on
Kubernetes not on the agent's machine at all). `bucket_location` says whether a container path lies under one of
a worker's bucket mounts, and where in the bucket; `list_below` lists it with the mount's own credentials (the
secret the worker was given), one paginated ListObjectsV2.

The adapter is botocore (the well-kept S3 client the tests use too); calls block, so the agent runs them in a
thread. Credentials are never logged: errors say the endpoint, bucket and S3 error code.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rlark_contracts.storage import S3Credentials, parse_bucket_url, parse_s3_credentials

from rlark_tunnel_agent.runtime.driver import MountType, WorkerSpec

MAX_KEYS = 100_000
"""A resume directory of more objects is not a handful of checkpoints: stop listing there."""


class BucketUnreadable(RuntimeError):
    """The bucket could not be listed (its error code and where, never a key)."""


@dataclass(frozen=True, slots=True)
class BucketPlace:
    credentials: S3Credentials
    bucket: str
    prefix: str
    """The key prefix of the container path (no trailing slash; "" for the bucket's root)."""


def bucket_location(spec: WorkerSpec, path: str) -> BucketPlace | None:
    """Where the container ``path`` lies in a bucket the worker mounts, with that mount's credentials; None when
    it lies under no objectStorage mount (or the mount's secret did not come with the spec)."""
    clean = posixpath.normpath(path)
    for mount in spec.mounts:
        if mount.type is not MountType.OBJECT_STORAGE or not mount.secret_ref:
            continue
        target = posixpath.normpath(mount.target)
        if clean != target and not clean.startswith(target.rstrip("/") + "/"):
            continue
        secret = spec.secret_values.get(mount.secret_ref)
        if secret is None:
            return None
        location = parse_bucket_url(mount.source)
        below = posixpath.relpath(clean, target)
        parts = [p for p in (location.prefix, "" if below == "." else below) if p]
        return BucketPlace(parse_s3_credentials(secret.get_secret_value()), location.bucket, "/".join(parts))
    return None


def _client(credentials: S3Credentials) -> Any:
    import botocore.session
    from botocore.config import Config

    session = botocore.session.get_session()
    return session.create_client(
        "s3",
        endpoint_url=credentials.endpoint,
        region_name=credentials.region,
        aws_access_key_id=credentials.access_key_id,
        aws_secret_access_key=credentials.secret_access_key.get_secret_value(),
        config=Config(
            s3={"addressing_style": "path"}, retries={"max_attempts": 3}, connect_timeout=10, read_timeout=30
        ),
    )


def list_below(place: BucketPlace) -> Iterator[tuple[str, int]]:
    """(key relative to the prefix, size) of every object below it; raises ``BucketUnreadable``."""
    from botocore.exceptions import BotoCoreError, ClientError

    prefix = f"{place.prefix}/" if place.prefix else ""
    seen = 0
    try:
        pages = (
            _client(place.credentials)
            .get_paginator("list_objects_v2")
            .paginate(Bucket=place.bucket, Prefix=prefix)
        )
        for page in pages:
            for item in page.get("Contents", ()):
                seen += 1
                if seen > MAX_KEYS:
                    return
                yield str(item["Key"])[len(prefix) :], int(item.get("Size", 0))
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "error")
        raise BucketUnreadable(f"{place.credentials.endpoint} bucket {place.bucket}: {code}") from None
    except BotoCoreError as exc:
        raise BucketUnreadable(
            f"{place.credentials.endpoint} bucket {place.bucket}: {type(exc).__name__}"
        ) from None
