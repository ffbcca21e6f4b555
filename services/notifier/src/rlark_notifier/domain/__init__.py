"""The notifier's pure domain: endpoint kinds, URL policy, request formats, signatures, backoff, sealing."""

from rlark_notifier.domain.backoff import Backoff
from rlark_notifier.domain.errors import NotifierInputError
from rlark_notifier.domain.formats import Outcome, OutgoingRequest, outcome, render, truncate
from rlark_notifier.domain.model import JOB_STATES, Kind, Language, Notification, Scope
from rlark_notifier.domain.registration import (
    validate_job_ids,
    validate_name,
    validate_secret,
    validate_states,
)
from rlark_notifier.domain.sealing import SealError, SecretBox
from rlark_notifier.domain.urls import UrlPolicy, address_allowed, literal_address, validate_url

__all__ = [
    "JOB_STATES",
    "Backoff",
    "Kind",
    "Language",
    "Notification",
    "NotifierInputError",
    "Outcome",
    "OutgoingRequest",
    "Scope",
    "SealError",
    "SecretBox",
    "UrlPolicy",
    "address_allowed",
    "literal_address",
    "outcome",
    "render",
    "truncate",
    "validate_job_ids",
    "validate_name",
    "validate_secret",
    "validate_states",
    "validate_url",
]
