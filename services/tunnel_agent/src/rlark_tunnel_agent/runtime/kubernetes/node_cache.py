"""What the Kubernetes driver knows of the cluster's nodes and of what every pod holds on them.

Fed on the event loop by the driver's Node watch and assigned-pod watch (and their relists); read by
``observe_nodes`` and by the driver's pod handling (a pod bound to a node that is gone). Not
thread-safe: the watch threads hand their events to the loop first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

from rlark_tunnel_agent.runtime.driver import NodeObservation
from rlark_tunnel_agent.runtime.kubernetes.kube import Obj
from rlark_tunnel_agent.runtime.kubernetes.observe import (
    NodeFacts,
    PodUsage,
    node_facts,
    node_usage,
    pod_usage,
)


class NodeCache:
    """The cluster's nodes by name, and what pods of every namespace hold on them by pod uid.

    ``is_ours(pod)`` tells the driver's own worker pods apart (their usage comes from the driver's pod
    cache, the others' from the assigned-pod watch); ``on_gone()`` runs after a node left the cluster.
    """

    def __init__(self, is_ours: Callable[[Obj], bool], on_gone: Callable[[], None]) -> None:
        self._is_ours = is_ours
        self._on_gone = on_gone
        self._nodes: dict[str, NodeFacts] = {}
        self._listed = False
        """Whether ``_nodes`` holds the cluster's nodes yet (a node missing before that is not gone)."""
        self._usage: dict[str, PodUsage] = {}
        self._changed = asyncio.Event()

    def replace(self, nodes: Sequence[Obj]) -> None:
        """A full list of the cluster's nodes (start, relist)."""
        self._nodes = {facts.name: facts for facts in map(node_facts, nodes)}
        self._listed = True
        self._changed.set()
        self._on_gone()

    def on_event(self, kind: str, node: Obj) -> None:
        """One event of the Node watch."""
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self._nodes.pop(name, None)
            self._changed.set()
            self._on_gone()
            return
        self.put(node_facts(node))

    def put(self, facts: NodeFacts) -> None:
        """A node as the API last answered it (a watch event, a cordon's reply)."""
        if self._nodes.get(facts.name) == facts:
            return
        self._nodes[facts.name] = facts
        self._changed.set()

    def gone_node(self, pod: Obj) -> str | None:
        """The node ``pod`` is bound to when that node no longer exists in the cluster."""
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or not self._listed or node in self._nodes:
            return None
        return str(node)

    def replace_usage(self, pods: Sequence[Obj]) -> None:
        """A full list of the assigned pods of every namespace."""
        self._usage = {}
        for pod in pods:
            self.on_usage_event("ADDED", pod)

    def on_usage_event(self, kind: str, pod: Obj) -> None:
        """One event of the assigned-pod watch."""
        uid = (pod.get("metadata") or {}).get("uid")
        if not uid:
            return
        usage = None if kind == "DELETED" else pod_usage(pod, ours=self._is_ours(pod))
        if usage is None:
            self._usage.pop(uid, None)
        else:
            self._usage[uid] = usage

    def observe(self, our_pods: Iterable[Obj]) -> list[NodeObservation]:
        """Every node with what every pod bound to it holds (see observe.py): the driver's worker pods
        (``our_pods``, from its own pod cache), other pods — RLark did not create them here — from the
        assigned-pod watch over every namespace."""
        ours = (u for pod in our_pods if (u := pod_usage(pod, ours=True)) is not None)
        others = (u for u in self._usage.values() if not u.ours)
        usage = node_usage([*ours, *others])
        return [self._nodes[n].report(usage.get(n)) for n in sorted(self._nodes)]

    def facts(self) -> list[NodeFacts]:
        """Everything observed per node (capacity and allocatable GPUs, cordon, addresses)."""
        return [self._nodes[n] for n in sorted(self._nodes)]

    async def wait_changed(self, timeout_s: float | None = None) -> bool:
        """Wait until the node set changed since the last call; False on timeout."""
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except TimeoutError:
            return False
        self._changed.clear()
        return True
