"""Provisioning the broker for one deployment (a topic prefix): topics, principals and their ACLs.

``provision_platform`` runs with the broker's admin principal, once per deploy (``make run``, the tests'
per-test prefix, the deploy's provisioning job): every registered topic and its DLQ, one SCRAM principal
per service with the password derived from the internal secret, and the ACLs of ``acls.py``.
``provision_agent`` runs in inventory (which holds ALTER on the cluster) when an agent opens a session and
when its cluster's agent credential is rotated: the agent's principal, its password for the credential's
epoch (an upsert, so a rotation replaces the old host's password at once) and its ACLs. Both are
idempotent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from rlark_contracts import TopicNames

from rlark_platform.messaging.access import (
    KafkaAccess,
    agent_principal,
    derive_agent_password,
    derive_password,
    service_principal,
)
from rlark_platform.messaging.acls import agent_acls, platform_acls, services
from rlark_platform.messaging.layout import TopicLayout
from rlark_platform.messaging.producer import ensure_cluster_topics, ensure_topics
from rlark_platform.messaging.security_admin import SecurityAdmin


def names_principal(names: TopicNames) -> Callable[[str], str]:
    return lambda service: service_principal(names.prefix, service)


async def await_login(access: KafkaAccess, timeout_s: float = 15.0) -> None:
    """Return once ``access`` logs in on the broker it will use.

    A credential (and the ACLs created before it) reaches the brokers through the metadata log, a few
    milliseconds after the controller accepted it; a client handed the password sooner would be refused.
    Metadata applies in order, so a working login also means the earlier ACLs are in force.
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        client = AIOKafkaAdminClient(**access.client_options(), client_id="rlark-login-check")
        try:
            await client.start()
            return
        except KafkaError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)
        finally:
            await client.close()


async def provision_platform(
    admin: KafkaAccess, names: TopicNames, internal_secret: str, *, layout: TopicLayout | None = None
) -> None:
    """Topics (laid out by ``layout``), service principals and their ACLs under ``names``' prefix."""
    await ensure_topics(admin, names, layout)
    passwords = {p: derive_password(internal_secret, p) for p in map(names_principal(names), services())}
    async with SecurityAdmin(admin) as security:
        await security.create_acls(platform_acls(names))
        await security.upsert_credentials(passwords)
    for principal, password in passwords.items():
        await await_login(KafkaAccess(admin.bootstrap, principal, password))


async def provision_agent(
    access: KafkaAccess,
    names: TopicNames,
    internal_secret: str,
    cluster: str,
    *,
    epoch: str,
    layout: TopicLayout | None = None,
) -> str:
    """The topics of ``cluster`` and its agent's principal with its ACLs; returns the agent's password
    for ``epoch`` (derived, never stored). The topics exist before the agent subscribes to them; when this
    returns, the password logs in and the principal's previous one (another epoch's) no longer does for
    new connections (connections already open end at the broker's ``connections.max.reauth.ms``)."""
    principal = agent_principal(names.prefix, cluster)
    password = derive_agent_password(internal_secret, principal, epoch)
    await ensure_cluster_topics(access, names, cluster, layout)
    async with SecurityAdmin(access, client_id="rlark-agent-provisioner") as security:
        await security.create_acls(agent_acls(names, cluster))
        await security.upsert_credentials({principal: password})
    await await_login(KafkaAccess(access.bootstrap, principal, password))
    return password


async def revoke_agent(access: KafkaAccess, names: TopicNames, cluster: str) -> None:
    """Remove ``cluster``'s agent principal and every ACL naming it (a deleted cluster)."""
    principal = agent_principal(names.prefix, cluster)
    async with SecurityAdmin(access, client_id="rlark-agent-provisioner") as security:
        await security.delete_acls_of(principal)
        await security.delete_credentials([principal])
