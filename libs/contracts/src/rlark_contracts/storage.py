"""Object storage a worker mounts: the bucket URL of an ``objectStorage`` mount and its credential document.

Role: the one definition of two formats both ends of a placement read. A role's ``objectStorage`` mount names
a bucket as ``s3://<bucket>[/<prefix>]`` (``events.scheduler.Mount.source``) and a secret by NAME
(``secret_ref``); the secret's value, delivered to the worker's runtime and never carried in a placement, is
one S3 credential document (JSON, camelCase as the API's bodies)::

    {"accessKeyId": "AKIA...", "secretAccessKey": "...", "endpoint": "https://s3.example.org", "region": "us-east-1"}

``region`` may be left out (``us-east-1``, what S3-compatible servers answer to by default). Whoever stores such
a secret validates it with :func:`parse_s3_credentials`; the runtime that mounts the bucket parses it again
there (ADR 0024).

Contract: errors name fields and rules, never a value — a secret pasted in the wrong field must not reach a log
or an API answer. Access keys and the endpoint hold no whitespace or control character (they are written into
a mounting tool's configuration line by line). Pure: pydantic and the standard library only.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

DEFAULT_REGION = "us-east-1"
BUCKET_SCHEME = "s3"

_TOKEN = re.compile(r"[\x21-\x7e]+")
"""Printable ASCII without space: what access keys, secrets and regions are made of."""
_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")


class CredentialsError(ValueError):
    """A credential document that breaks the format; ``str(exc)`` names the fields, never their values."""


class BucketUrlError(ValueError):
    """A bucket URL that breaks the format; ``str(exc)`` says which rule."""


class S3Credentials(BaseModel):
    """One S3 credential document (see the module docstring). The secret key is a ``SecretStr``: it prints as
    ``**********`` and is read only with ``get_secret_value()``."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, hide_input_in_errors=True)

    access_key_id: str = Field(alias="accessKeyId")
    secret_access_key: SecretStr = Field(alias="secretAccessKey")
    endpoint: str
    """``http(s)://host[:port]``: the S3 API's address (no path, query, credentials or fragment)."""
    region: str = DEFAULT_REGION

    @field_validator("access_key_id")
    @classmethod
    def _key_is_one_token(cls, value: str) -> str:
        return _token(value, 128)

    @field_validator("secret_access_key")
    @classmethod
    def _secret_is_one_token(cls, value: SecretStr) -> SecretStr:
        _token(value.get_secret_value(), 256)
        return value

    @field_validator("region")
    @classmethod
    def _region_is_a_name(cls, value: str) -> str:
        if not _REGION.fullmatch(value):
            raise ValueError("must be lowercase letters, digits and hyphens (at most 63)")
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_a_base_url(cls, value: str) -> str:
        if _CONTROL.search(value) or len(value) > 2048:
            raise ValueError("must be a URL of at most 2048 characters without spaces or control characters")
        if "@" in value:
            raise ValueError("must not carry credentials (they belong in accessKeyId and secretAccessKey)")
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError("must name only the server: scheme, host and port")
        try:
            _ = parts.port
        except ValueError:
            raise ValueError("has an invalid port") from None
        return value.rstrip("/")

    def document(self) -> str:
        """The JSON document this parses from (the secret key in clear: for the secret's own file only)."""
        return json.dumps(
            {
                "accessKeyId": self.access_key_id,
                "secretAccessKey": self.secret_access_key.get_secret_value(),
                "endpoint": self.endpoint,
                "region": self.region,
            }
        )


def parse_s3_credentials(raw: str | bytes) -> S3Credentials:
    """The credential document ``raw`` holds, or :class:`CredentialsError` naming what is wrong (never a
    value: not even in the exception's cause)."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise CredentialsError("not a JSON object") from None
    if not isinstance(data, dict):
        raise CredentialsError("not a JSON object")
    try:
        return S3Credentials.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_input=False, include_url=False):
            field = ".".join(str(part) for part in error["loc"]) or "document"
            problems.append(f"{field}: {_said(error['type'], error['msg'])}")
        raise CredentialsError("; ".join(problems)) from None


def _token(value: str, most: int) -> str:
    if not _TOKEN.fullmatch(value) or len(value) > most:
        raise ValueError(f"must be 1-{most} printable characters without spaces")
    return value


def _said(kind: str, message: str) -> str:
    """Pydantic's message for one error; the rules' own sentences (ours quote no input)."""
    if kind == "missing":
        return "missing"
    if kind == "extra_forbidden":
        return "not a field of an S3 credential document"
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    return "must be a string" if kind == "string_type" else "invalid"


@dataclass(frozen=True, slots=True)
class BucketLocation:
    """Where an ``objectStorage`` mount leads: a bucket and a key prefix in it ("" for the whole bucket)."""

    bucket: str
    prefix: str = ""

    @property
    def path(self) -> str:
        """``bucket`` or ``bucket/prefix``: the location as S3 tools (rclone, s3fs) name it."""
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def url(self) -> str:
        return f"{BUCKET_SCHEME}://{self.path}"


def parse_bucket_url(url: str) -> BucketLocation:
    """``s3://bucket[/prefix]`` as a :class:`BucketLocation`, or :class:`BucketUrlError`.

    The bucket follows S3's naming rules (3–63 lowercase letters, digits, dots and hyphens; no IP address);
    the prefix is key components separated by ``/`` — none empty, ``.`` or ``..``, no control characters —
    and a trailing ``/`` is dropped (``s3://b/ckpt/`` is ``s3://b/ckpt``)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme != BUCKET_SCHEME:
        raise BucketUrlError(f"must start with {BUCKET_SCHEME}://")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket or _is_address(bucket):
        raise BucketUrlError(
            "the bucket must be 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a "
            "letter or digit"
        )
    prefix = prefix.removesuffix("/")
    if prefix:
        if _CONTROL.search(prefix.replace(" ", "")):
            raise BucketUrlError("the prefix must not contain control characters")
        if any(part in ("", ".", "..") for part in prefix.split("/")):
            raise BucketUrlError("the prefix must not have empty, '.' or '..' components")
        if len(prefix.encode()) > 1024:
            raise BucketUrlError("the prefix must be at most 1024 bytes")
    return BucketLocation(bucket, prefix)


def _is_address(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True
