"""Which service serves a path, who may call it, and how a change is named in the audit log.

The gateway authorises by role before forwarding; the owning services check ownership again with the
signed caller (defence in depth). Admins manage clusters (and their nodes), network domains and users;
users read everything public and manage their own keys, jobs and notification endpoints.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from rlark_gateway.domain.accounts import Identity

API_PREFIX = "/api/v1"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CHANGE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PROXY_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
AGENT_SESSION_PATH = f"{API_PREFIX}/agent/session"
AGENT_LEASE_PATH = f"{API_PREFIX}/agent/lease"
"""An agent's cluster lease (ADR 0018), renewed every few seconds: public like the session (inventory checks
the agent token), and a granted renewal is a keep-alive, not a change worth an audit row."""
AGENT_PUBLIC_PATHS = frozenset({AGENT_SESSION_PATH, AGENT_LEASE_PATH})

_METHOD_VERB = {"POST": "create", "PUT": "replace", "PATCH": "update", "DELETE": "delete"}
_TRUE = {"1", "true", "yes", "on"}


class Access(StrEnum):
    PUBLIC = "public"
    USER = "user"
    ADMIN = "admin"


@dataclass(frozen=True)
class ProxyRoute:
    """``/api/v1/<resource>…`` is served by ``service``; ``tag`` and ``summary`` document it."""

    resource: str
    service: str
    summary: str


PROXY_ROUTES: tuple[ProxyRoute, ...] = (
    ProxyRoute("clusters", "inventory", "Clusters, agent credentials, node detail, cordon, matching"),
    ProxyRoute("nodes", "inventory", "Nodes across clusters with filters"),
    ProxyRoute("labels", "inventory", "Node label keys and values"),
    ProxyRoute("agent", "inventory", "Agents trade their cluster credential for a session"),
    ProxyRoute("keys", "keys", "Users' SSH public keys"),
    ProxyRoute("secrets", "keys", "Named secrets jobs reference (values are set, never returned)"),
    ProxyRoute("domains", "netdomain", "Network domains and CIDR checks"),
    ProxyRoute("jobs", "scheduler", "Jobs: preview, submit, status, logs, events, cancel"),
    ProxyRoute("templates", "scheduler", "Job templates"),
    ProxyRoute("projects", "scheduler", "Projects, their members and GPU quotas (admins change them)"),
    ProxyRoute(
        "queue", "scheduler", "Waiting jobs in round order; for yours: jobs ahead, estimated start, hints"
    ),
    ProxyRoute("notifications", "notifier", "Webhooks for job state changes and their delivery logs"),
)
_BY_RESOURCE = {route.resource: route for route in PROXY_ROUTES}


@dataclass(frozen=True)
class Denial:
    code: str
    message: str
    field: str | None = None


def api_segments(path: str) -> list[str] | None:
    """The segments after ``/api/v1/``, or None for paths outside the API."""
    if path != API_PREFIX and not path.startswith(API_PREFIX + "/"):
        return None
    return [s for s in path[len(API_PREFIX) :].split("/") if s]


def has_dot_segments(path: str) -> bool:
    """True for paths with ``.`` or ``..`` segments: they could be resolved by a later hop into another
    resource than the one authorised here (``/api/v1/nodes/../clusters``), so they are refused."""
    return any(segment in (".", "..") for segment in path.split("/"))


def _resource(segment: str) -> tuple[str, str | None]:
    """``domains:check`` → (``domains``, ``check``); ``jobs`` → (``jobs``, None)."""
    name, sep, verb = segment.partition(":")
    return name, (verb if sep else None)


def proxy_route(path: str) -> ProxyRoute | None:
    """The upstream route of ``path``, or None when no service serves it."""
    segments = api_segments(path)
    if not segments:
        return None
    return _BY_RESOURCE.get(_resource(segments[0])[0])


def required_access(method: str, path: str) -> Access:
    """The least role that may call ``method path`` on a proxied route."""
    segments = api_segments(path) or []
    resource, verb = _resource(segments[0]) if segments else ("", None)
    if resource == "agent":
        # Agents authenticate to inventory with their own credential; nothing else there is public.
        return Access.PUBLIC if (method == "POST" and path in AGENT_PUBLIC_PATHS) else Access.ADMIN
    if method in READ_METHODS:
        return Access.USER
    if resource in ("clusters", "projects"):
        return Access.ADMIN
    if resource == "domains":
        return Access.USER if (verb == "check" and len(segments) == 1) else Access.ADMIN
    return Access.USER


def denial(caller: Identity, method: str, path: str, query: Iterable[tuple[str, str]]) -> Denial | None:
    """Why ``caller`` may not make this request, or None when the gateway lets it through."""
    access = required_access(method, path)
    if access is Access.ADMIN and not caller.is_admin:
        return Denial("forbidden", f"{method} {path} needs the admin role")
    if caller.is_admin:
        return None
    route = proxy_route(path)
    resource = route.resource if route else ""
    for key, value in query:
        if resource == "keys" and key == "all" and value.lower() in _TRUE:
            return Denial("forbidden", "only admins list every user's keys", "all")
        if resource == "notifications" and key == "all" and value.lower() in _TRUE:
            return Denial("forbidden", "only admins list every user's notification endpoints", "all")
        if resource == "jobs" and key == "owner" and value not in ("", caller.user):
            return Denial("forbidden", "users see only their own jobs", "owner")
    return None


def audit_action(method: str, path: str) -> tuple[str, str]:
    """``(action, target)`` naming a change, e.g. ``PATCH /api/v1/clusters/a`` → (``clusters.update``,
    ``clusters/a``); ``POST …/jobs/j1:cancel`` → (``jobs.cancel``, ``jobs/j1``); ``POST
    …/clusters/c/nodes/n/cordon`` → (``clusters.cordon``, ``clusters/c/nodes/n``)."""
    segments = api_segments(path)
    if not segments:
        return method.lower(), path
    resource, verb = _resource(segments[0])
    rest = segments[1:]
    if rest and ":" in rest[-1]:
        last, verb = _resource(rest[-1])
        rest = [*rest[:-1], last]
    base = _METHOD_VERB.get(method, method.lower())
    if verb is None:
        if len(rest) % 2 == 0 and rest:
            # /<resource>/<id>/<sub-action or sub-resource>
            sub = rest.pop()
            verb = sub if method == "POST" else f"{sub}.{base}"
        elif len(rest) == 1 and method == "POST":
            # POST on a named singleton: /agent/session
            verb = rest.pop()
        else:
            verb = base
    return f"{resource}.{verb}", "/".join([resource, *rest])
