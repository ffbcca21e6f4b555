"""How a placement's layout is said (ADR 0026): which clusters the placer chose for a job and why, as the
preview shows it before submission and the timeline records it at placement, in every language (ADR 0011).

Role: turn a :class:`~rlark_scheduler.domain.placement.Layout` into catalogue sentences and JSON. Pure; the
choosing itself is ``placement``'s.

- a job whose roles name their clusters: "on the clusters its roles name: gpu-a, gpu-b";
- one cluster chosen: "fits on north alone";
- spanning: "no single cluster fits its 24 workers (192 GPUs) now: actor → north, rollout → south, 3 ms
  apart, through network domain lab" — roles with the clusters of their workers, the slowest measured round
  trip between the clusters, the domain their workers join.

Roles are listed as ``role → cluster`` (a split role ``role → north + south``): a notation every language
reads, so the sentence needs no list grammar of its own.
"""

from __future__ import annotations

from typing import Any

from rlark_contracts.messages import Text, text

from rlark_scheduler.domain.placement import Layout, LayoutKind, Placement


def roles_text(layout: Layout) -> str:
    """``actor → north, rollout → north + south``: each role and the clusters of its workers, in rank order."""
    return ", ".join(f"{role} → {' + '.join(clusters)}" for role, clusters in layout.roles)


def rtt_text(rtt_ms: float) -> str:
    """A round trip as the sentences show it: tenths below 10 ms, whole milliseconds above."""
    return f"{rtt_ms:.1f}" if rtt_ms < 10 else f"{rtt_ms:.0f}"


def layout_text(placement: Placement) -> Text:
    """Where the placer would put the job now and why (the preview's sentence)."""
    layout = _layout(placement)
    if layout.kind is LayoutKind.NAMED:
        return text("layout.named", clusters=", ".join(layout.clusters))
    if layout.kind is LayoutKind.ONE:
        return text("layout.one", cluster=layout.clusters[0])
    params = _span_params(placement, layout)
    if layout.rtt_ms is None:
        return text("layout.span.unmeasured", **params)
    return text("layout.span", rtt=rtt_text(layout.rtt_ms), **params)


def placed_text(placement: Placement) -> Text:
    """The timeline's sentence for a placement committed: how many workers went where, and why there."""
    layout = _layout(placement)
    workers = len(placement.workers)
    clusters = ", ".join(layout.clusters)
    if layout.kind is LayoutKind.ONE:
        return text("job.placed.chosen", workers=workers, cluster=layout.clusters[0])
    if layout.kind is LayoutKind.SPAN:
        params: dict[str, str | int] = {
            "workers": workers,
            "clusters": clusters,
            "domain": layout.domain or "",
            "roles": roles_text(layout),
        }
        if layout.rtt_ms is None:
            return text("job.placed.span.unmeasured", **params)
        return text("job.placed.span", rtt=rtt_text(layout.rtt_ms), **params)
    if workers == 1:
        return text("job.placed.one", clusters=clusters)
    return text("job.placed", workers=workers, clusters=clusters)


def layout_view(placement: Placement) -> dict[str, Any]:
    """A layout as JSON (the preview's ``layout``, a placement's timeline details): kind, clusters in rank
    order, the domain joined, each role's clusters, the slowest round trip, split and apart roles, and the
    sentence (``message`` in English, ``parts`` for every language)."""
    layout = _layout(placement)
    said = layout_text(placement)
    return {
        "kind": layout.kind.value,
        "clusters": list(layout.clusters),
        "domain": layout.domain,
        "roles": [{"role": role, "clusters": list(clusters)} for role, clusters in layout.roles],
        "rtt_ms": layout.rtt_ms,
        "split": list(layout.split),
        "apart": list(layout.apart),
        "message": said.english,
        "parts": [said.wire()],
    }


def _layout(placement: Placement) -> Layout:
    """The placement's layout; one the placer did not describe is read off its workers as named."""
    if placement.layout is not None:
        return placement.layout
    roles: dict[str, dict[str, None]] = {}
    for worker in placement.workers:
        roles.setdefault(worker.role, {})[worker.cluster] = None
    used = tuple(dict.fromkeys(w.cluster for w in placement.workers))
    return Layout(LayoutKind.NAMED, used, None, tuple((r, tuple(c)) for r, c in roles.items()))


def _span_params(placement: Placement, layout: Layout) -> dict[str, str | int]:
    return {
        "workers": len(placement.workers),
        "gpus": sum(w.gpus for w in placement.workers),
        "roles": roles_text(layout),
        "domain": layout.domain or "",
    }
