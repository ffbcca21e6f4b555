"""Named secrets as every component refers to them (ADR 0025): the name's rule, and where a worker finds them.

A job names secrets; it never carries a value. The keys service holds the values; the scheduler checks that a
job names only secrets its owner (or its project) has; the agent fetches the values for the worker it is about
to create and puts each where only that worker reads it: a file named after the secret in the worker's secrets
directory (``$RLARK_SECRETS_DIR``), and the environment variables the job maps to it.
"""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$")
"""1-63 lower-case letters, digits, '-', '_' or '.', starting and ending with a letter or digit: also a file name in
the worker and a key of a Kubernetes Secret."""


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.match(name))
