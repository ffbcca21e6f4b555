"""What a cluster's hostPath policy means: the allow-list carried by ``inventory.cluster.*`` events.

Role: the one definition of the rules both ends of the contract apply — inventory when an admin sets a
cluster's allow-list (``policy_problem``/``normalise_policy``), the scheduler when a job names a hostPath
source (``source_decision``). Pure, standard library only.

Rules (ADR 0006):
- Default deny: an empty allow-list allows no hostPath at all.
- Paths are compared as written, lexically, after normalisation: absolute, no control characters, no
  empty-name tricks (``//`` and a trailing ``/`` collapse), and never a ``.`` or ``..`` component —
  those are refused rather than resolved, because ``a/../b`` on a host with symlinks is not ``b``. The
  server cannot see the hosts' file systems, so a policy entry must name the real (symlink-free)
  directory; the allow-list is not a substitute for keeping user-writable trees free of planted links.
- A prefix matches on whole path components: ``/data`` allows ``/data`` and ``/data/x``, never
  ``/data2`` nor ``/``.
- Some host paths are never mountable, whatever an admin allows (:data:`PROTECTED`): the root, the
  kernel's and devices' trees, the host's configuration, the container runtimes' state and sockets.
  A policy entry that is one of them, lies under one, or contains one is refused; so is a source whose
  last component is a socket (``*.sock``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_PREFIXES = 32
MAX_PATH_CHARS = 1024

PROTECTED: tuple[str, ...] = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/proc",
    "/root/.ssh",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/lib/etcd",
    "/var/lib/kubelet",
    "/var/run",
)
"""Host paths no policy can open: mounting them (or a tree holding them, the root included) hands a
worker the host."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class HostPathError(ValueError):
    """A path that breaks a rule; ``str(exc)`` says which, without the field (the caller names it)."""


def normalise(path: str) -> str:
    """``path`` in canonical form (``//`` and a trailing ``/`` collapsed); raise :class:`HostPathError`
    when it is not absolute, too long, has control characters, or has a ``.``/``..`` component."""
    if not path.startswith("/"):
        raise HostPathError("must be an absolute path (starting with /)")
    if len(path) > MAX_PATH_CHARS:
        raise HostPathError(f"must be at most {MAX_PATH_CHARS} characters")
    if _CONTROL.search(path):
        raise HostPathError("must not contain control characters")
    parts = [part for part in path.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise HostPathError("must not contain '.' or '..' components (write the real directory)")
    return "/" + "/".join(parts)


def _components(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part)


def is_under(path: str, prefix: str) -> bool:
    """True when normalised ``path`` is ``prefix`` or inside it, compared on whole components."""
    inner, outer = _components(path), _components(prefix)
    return inner[: len(outer)] == outer


def protected_above(path: str) -> str | None:
    """The protected path that normalised ``path`` is or lies under; ``/`` for the root itself."""
    if path == "/":
        return "/"
    return next((p for p in PROTECTED if is_under(path, p)), None)


def protected_clash(path: str) -> str | None:
    """The protected path that normalised ``path`` is, lies under, or contains (None when clear)."""
    return protected_above(path) or next((p for p in PROTECTED if is_under(p, path)), None)


def policy_problem(prefix: str) -> str | None:
    """Why ``prefix`` cannot be an allow-list entry (None when it can)."""
    try:
        canonical = normalise(prefix)
    except HostPathError as exc:
        return str(exc)
    clash = protected_clash(canonical)
    if clash == "/":
        return "must not be the root directory: that would allow every host path"
    if clash is not None:
        return f"{canonical} overlaps the protected host path {clash}, which no policy can allow"
    if canonical.rsplit("/", 1)[-1].endswith(".sock"):
        return "must be a directory, not a socket"
    return None


@dataclass(frozen=True, slots=True)
class PolicyProblem:
    """An allow-list that breaks a rule: the index of the entry as given (None: the list), and why."""

    index: int | None
    message: str


class PolicyError(ValueError):
    """An allow-list that cannot be stored; ``problem`` names the entry."""

    def __init__(self, problem: PolicyProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def normalise_policy(prefixes: Sequence[str]) -> tuple[str, ...]:
    """The allow-list in canonical form: normalised, sorted, without duplicates and without entries
    already covered by another. Raise :class:`PolicyError` naming the first bad entry."""
    if len(prefixes) > MAX_PREFIXES:
        raise PolicyError(PolicyProblem(None, f"at most {MAX_PREFIXES} prefixes"))
    canonical: list[str] = []
    for index, prefix in enumerate(prefixes):
        problem = policy_problem(prefix)
        if problem is not None:
            raise PolicyError(PolicyProblem(index, problem))
        canonical.append(normalise(prefix))
    kept = [p for p in set(canonical) if not any(o != p and is_under(p, o) for o in canonical)]
    return tuple(sorted(kept))


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a hostPath source may be mounted; ``rule`` says which rule decided, for the message."""

    allowed: bool
    rule: str


def source_decision(source: str, allow: Iterable[str]) -> Decision:
    """May a worker mount host path ``source`` under the allow-list ``allow`` (entries normalised)?"""
    try:
        canonical = normalise(source)
    except HostPathError as exc:
        return Decision(False, str(exc))
    if canonical.rsplit("/", 1)[-1].endswith(".sock"):
        return Decision(False, f"{canonical} is a socket; sockets are never mounted")
    clash = protected_above(canonical)
    if clash is not None:
        what = "the root directory" if clash == "/" else f"under the protected host path {clash}"
        return Decision(False, f"{canonical} is {what}, which no policy allows")
    allow = tuple(allow)
    if not allow:
        return Decision(False, "the cluster's hostPath policy allows no host path (default deny)")
    for prefix in allow:
        if is_under(canonical, prefix):
            return Decision(True, f"allowed by the prefix {prefix}")
    return Decision(False, f"{canonical} is not under an allowed prefix ({', '.join(allow)})")
