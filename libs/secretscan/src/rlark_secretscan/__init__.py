"""Secret scanning shared by the services that take text from users (job documents, SSH key comments,
request headers kept with a job): :mod:`rlark_secretscan.scanner` holds the rules, and
:mod:`rlark_secretscan.unwrap` the decoding and line joining that show a wrapped secret's shape.

Pure text analysis: no I/O, no state, deterministic, no dependency. A finding names the kind, the field
and the position of a secret, never the secret.
"""

from rlark_secretscan.scanner import (
    SecretFinding,
    SecretKind,
    classify_name,
    describe_kind,
    scan_assignment,
    scan_mapping,
    scan_text,
)

__all__ = [
    "SecretFinding",
    "SecretKind",
    "classify_name",
    "describe_kind",
    "scan_assignment",
    "scan_mapping",
    "scan_text",
]
