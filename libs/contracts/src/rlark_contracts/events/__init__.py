"""Every event type, grouped by producing service. Importing this package registers them all."""

from rlark_contracts.events import agent, inventory, keys, netdomain, scheduler

__all__ = ["agent", "inventory", "keys", "netdomain", "scheduler"]
