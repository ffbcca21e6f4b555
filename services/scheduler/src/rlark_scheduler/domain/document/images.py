"""Image references: ``spec.tasks[*].image`` parsed by the OCI distribution grammar, with an explicit tag or a
digest (``latest`` only when a digest pins it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlark_contracts.messages import Text, text


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A parsed image reference ``[domain/]path[:tag][@digest]``."""

    domain: str | None
    path: str
    tag: str | None
    digest: str | None


class ImageError(ValueError):
    """An unacceptable image reference: ``code`` and the message ``key`` with its ``params`` (the
    sentence names the field, which the caller supplies)."""

    def __init__(self, code: str, key: str, **params: str) -> None:
        super().__init__(text(key, field="image", **params))
        self.code = code
        self.key = key
        self.params = params


_DOMAIN = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?"
)
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"(?P<alg>[a-z0-9]+(?:[.+_-][a-z0-9]+)*):(?P<hex>[0-9a-f]{32,})")
_DIGEST_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}


def parse_image(reference: str) -> ImageRef:
    """Parse an image reference by the OCI distribution grammar; raise :class:`ImageError`.

    ``host:5000/img`` has no tag (the ``:5000`` is the registry port); ``latest`` is refused
    unless a digest pins the image; references without tag and digest are refused.
    """
    if not reference or reference != reference.strip() or any(c.isspace() for c in reference):
        raise ImageError("image_invalid", "image_invalid.empty")
    if len(reference) > 4096:
        raise ImageError("image_invalid", "image_invalid.too_long")
    name_and_tag, at, digest = reference.partition("@")
    if at:
        match = _DIGEST.fullmatch(digest)
        expected = _DIGEST_LENGTHS.get(match.group("alg")) if match else None
        if match is None or (expected is not None and len(match.group("hex")) != expected):
            raise ImageError("image_invalid", "image_invalid.digest", digest=digest)
    slash = name_and_tag.rfind("/")
    colon = name_and_tag.rfind(":")
    tag: str | None = None
    name = name_and_tag
    if colon > slash:
        name, tag = name_and_tag[:colon], name_and_tag[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ImageError("image_invalid", "image_invalid.tag", tag=tag)
    components = name.split("/")
    domain: str | None = None
    first = components[0]
    if len(components) > 1 and (
        "." in first
        or ":" in first
        or first == "localhost"
        or first.startswith("[")
        or first != first.lower()
    ):
        domain = first
        components = components[1:]
        if not _DOMAIN.fullmatch(domain):
            raise ImageError("image_invalid", "image_invalid.registry", host=domain)
    for component in components:
        if not _PATH_COMPONENT.fullmatch(component):
            raise ImageError("image_invalid", "image_invalid.component", component=component)
    if len(name) > 255:
        raise ImageError("image_invalid", "image_invalid.repository_too_long")
    if tag is None and not at:
        raise ImageError("image_tag_required", "image_tag_required")
    if tag is not None and tag.lower() == "latest" and not at:
        raise ImageError("image_latest_refused", "image_latest_refused")
    return ImageRef(domain, "/".join(components), tag, digest if at else None)


def image_problem(reference: str, field: str = "image") -> tuple[str, Text] | None:
    """``(code, message)`` when ``reference`` is not acceptable, else None; the message names ``field``."""
    try:
        parse_image(reference)
    except ImageError as exc:
        return exc.code, text(exc.key, field=field, **exc.params)
    return None
