"""The broker's security administration over the Kafka protocol: SCRAM credentials and ACLs.

aiokafka's admin client creates topics but has no call for ``AlterUserScramCredentials`` (API 51) or for
creating and deleting ACLs in batches, so this module sends those requests itself through the admin
client's connection, with the request schemas of the Kafka protocol. The password never travels: the
client sends a random salt and the PBKDF2 salted password, as ``kafka-configs --add-config
'SCRAM-SHA-512=[...]'`` does; the broker derives and keeps SCRAM's stored and server keys.

Every call is idempotent: upserting a credential replaces it, creating an existing ACL is a no-op,
deleting absent ones deletes nothing.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import for_code
from aiokafka.protocol.admin import (
    CreateAclsRequest_v1,
    DeleteAclsRequest_v1,
)
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactBytes,
    CompactString,
    Int8,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from rlark_platform.messaging.access import KafkaAccess
from rlark_platform.messaging.acls import Acl

SCRAM_SHA_512 = 2
SCRAM_ITERATIONS = 8192
_ANY = 1
_ALLOW = 3


class _AlterUserScramCredentialsResponse_v0(Response):  # type: ignore[misc]  # aiokafka.protocol is untyped
    API_KEY = 51
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "results",
            CompactArray(
                ("user", CompactString("utf-8")),
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _AlterUserScramCredentialsRequest_v0(RequestStruct):  # type: ignore[misc]  # aiokafka.protocol is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 51
    API_VERSION = 0
    RESPONSE_TYPE = _AlterUserScramCredentialsResponse_v0
    SCHEMA = Schema(
        (
            "deletions",
            CompactArray(("name", CompactString("utf-8")), ("mechanism", Int8), ("tags", TaggedFields)),
        ),
        (
            "upsertions",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("mechanism", Int8),
                ("iterations", Int32),
                ("salt", CompactBytes),
                ("salted_password", CompactBytes),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _AlterUserScramCredentials(Request[_AlterUserScramCredentialsRequest_v0]):  # type: ignore[misc]  # aiokafka.protocol is untyped
    API_KEY = 51

    def __init__(self, deletions: list[tuple[Any, ...]], upsertions: list[tuple[Any, ...]]) -> None:
        self._deletions = deletions
        self._upsertions = upsertions

    def build(
        self, request_struct_class: type[_AlterUserScramCredentialsRequest_v0]
    ) -> _AlterUserScramCredentialsRequest_v0:
        return request_struct_class(self._deletions, self._upsertions, {})


class _CreateAcls(Request[CreateAclsRequest_v1]):  # type: ignore[misc]  # aiokafka.protocol is untyped
    """Many ACLs in one request (aiokafka's own request class carries one)."""

    API_KEY = 30

    def __init__(self, creations: list[tuple[Any, ...]]) -> None:
        self._creations = creations

    def build(self, request_struct_class: type[CreateAclsRequest_v1]) -> CreateAclsRequest_v1:
        return request_struct_class(self._creations)


class _DeleteAcls(Request[DeleteAclsRequest_v1]):  # type: ignore[misc]  # aiokafka.protocol is untyped
    API_KEY = 31

    def __init__(self, filters: list[tuple[Any, ...]]) -> None:
        self._filters = filters

    def build(self, request_struct_class: type[DeleteAclsRequest_v1]) -> DeleteAclsRequest_v1:
        return request_struct_class(self._filters)


class SecurityAdminError(RuntimeError):
    """The broker refused a security change (the message names the principal or ACL)."""


def salted_password(password: str, salt: bytes, iterations: int = SCRAM_ITERATIONS) -> bytes:
    """SCRAM's ``Hi(password, salt, i)``: PBKDF2 with HMAC-SHA-512 (RFC 5802)."""
    return hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)


class SecurityAdmin:
    """An admin connection that changes principals and ACLs; needs ALTER on the Kafka cluster."""

    def __init__(self, access: KafkaAccess, client_id: str = "rlark-security-admin") -> None:
        self._admin = AIOKafkaAdminClient(**access.client_options(), client_id=client_id)

    async def __aenter__(self) -> SecurityAdmin:
        await self._admin.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._admin.close()

    async def _send(self, request: Request[Any]) -> Any:
        # The admin client has no public call for these requests; its connection sends any Request.
        client = self._admin._client
        return await client.send(client.get_random_node(), request)

    async def upsert_credentials(self, passwords: dict[str, str]) -> None:
        """Create or replace the SCRAM-SHA-512 credential of each ``principal: password``."""
        if not passwords:
            return
        upsertions: list[tuple[Any, ...]] = []
        for name, password in sorted(passwords.items()):
            salt = secrets.token_bytes(32)
            upsertions.append(
                (name, SCRAM_SHA_512, SCRAM_ITERATIONS, salt, salted_password(password, salt), {})
            )
        response = await self._send(_AlterUserScramCredentials([], upsertions))
        self._raise_scram_errors(response, "upsert")

    async def delete_credentials(self, principals: list[str]) -> None:
        """Delete the SCRAM-SHA-512 credential of each principal; an absent one is not an error."""
        if not principals:
            return
        deletions: list[tuple[Any, ...]] = [(name, SCRAM_SHA_512, {}) for name in sorted(principals)]
        response = await self._send(_AlterUserScramCredentials(deletions, []))
        self._raise_scram_errors(
            response, "delete", ignore={"ResourceNotFoundError"}, ignore_codes={91}
        )  # 91: RESOURCE_NOT_FOUND, unnamed in aiokafka

    @staticmethod
    def _raise_scram_errors(
        response: Any, action: str, ignore: set[str] | None = None, ignore_codes: set[int] | None = None
    ) -> None:
        for user, code, message, _ in response.results:
            if code == 0 or code in (ignore_codes or set()):
                continue
            error = for_code(code)
            if ignore and error.__name__ in ignore:
                continue
            raise SecurityAdminError(f"{action} SCRAM credential of {user!r}: {error.__name__}: {message}")

    async def create_acls(self, acls: list[Acl]) -> None:
        """Create ALLOW rules for every host; existing ones stay as they are."""
        if not acls:
            return
        creations = [
            (a.resource_type, a.resource, a.pattern, a.kafka_principal, "*", a.operation, _ALLOW)
            for a in acls
        ]
        response = await self._send(_CreateAcls(creations))
        for acl, (code, message) in zip(acls, response.creation_responses, strict=True):
            if code != 0:
                raise SecurityAdminError(f"create ACL {acl}: {for_code(code).__name__}: {message}")

    async def delete_acls_of(self, principal: str) -> int:
        """Delete every ACL naming ``principal``; return how many went."""
        response = await self._send(_DeleteAcls([(_ANY, None, _ANY, f"User:{principal}", None, _ANY, _ANY)]))
        deleted = 0
        for code, message, matching in response.filter_responses:
            if code != 0:
                raise SecurityAdminError(
                    f"delete ACLs of {principal!r}: {for_code(code).__name__}: {message}"
                )
            deleted += len(matching)
        return deleted
