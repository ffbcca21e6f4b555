"""Field paths in a job document: ``spec.tasks[1].image``,
``spec.tasks[0].nodeSelector["rlark.io/gpu-model"]``.

Every problem found in a document names its field this way (parse errors, validation issues, secret findings),
and the source spans (:mod:`.source`) are keyed by the same paths. Keys that are not identifiers are quoted.
"""

from __future__ import annotations

import json
import re

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def child_path(parent: str, key: str | int) -> str:
    """The path of ``key`` under ``parent``: ``a.b``, ``a[3]`` or ``a["x/y"]``."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if _IDENTIFIER.fullmatch(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{json.dumps(key)}]"


def parent_path(path: str) -> str:
    """Inverse of :func:`child_path` for the last segment; the root's parent is the root."""
    if path.endswith('"]'):
        start = path.rfind('["')
        while start > 0:
            try:
                json.loads(path[start + 1 : -1])
            except ValueError:
                start = path.rfind('["', 0, start)
                continue
            return path[:start]
        return path[: max(start, 0)]
    if path.endswith("]"):
        return path[: path.rfind("[")]
    cut = max(path.rfind("."), path.rfind("]"))
    if cut < 0:
        return ""
    return path[:cut] if path[cut] == "." else path[: cut + 1]
