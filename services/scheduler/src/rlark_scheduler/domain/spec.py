"""Moved: the job document lives in :mod:`rlark_scheduler.domain.document` (issue 34).

Kept only for the importers outside the scheduler (``libs/devinfra``'s benches) until they import from there.
"""

from rlark_scheduler.domain.document.model import SpanClusters
from rlark_scheduler.domain.document.parsing import parse_job_document

__all__ = ["SpanClusters", "parse_job_document"]
