"""Writes a golden JSON fixture for every registered event type that has none yet.

Existing fixtures are never rewritten: they stay forever so old events keep decoding.
Run: uv run python libs/contracts/tests/make_golden.py
"""

from __future__ import annotations

import json
import types
import typing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rlark_contracts import EVENT_TYPES, new_envelope

GOLDEN = Path(__file__).parent / "golden"
WHEN = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def sample(annotation: Any, name: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return sample(next(a for a in args if a is not type(None)), name)
    if origin is list:
        return [sample(args[0], name)]
    if origin is dict:
        if args[0] is not str:
            return {}
        return {"gpu-a": 8} if args[1] is int else {"rlark.io/gpu-model": "A100"}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {f: sample(i.annotation, f) for f, i in annotation.model_fields.items()}
    if annotation is bool:
        return True
    if annotation is int:
        return 2
    if annotation is float:
        return 2.5
    if annotation is datetime:
        return WHEN.isoformat()
    if annotation is str:
        return {
            "cluster": "gpu-a",
            "job_id": "job-7f3c",
            "worker_id": "job-7f3c-actor-0",
            "cidr": "10.100.0.0/16",
            "address": "10.100.0.2",
        }.get(name, f"example-{name}")
    return None


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for type_name, (model, _topic) in sorted(EVENT_TYPES.items()):
        path = GOLDEN / f"{type_name}.json"
        if path.exists():
            continue
        data = model.model_validate({f: sample(i.annotation, f) for f, i in model.model_fields.items()})
        envelope = new_envelope(
            data,
            source="golden",
            subject="example",
            event_id=f"golden-{type_name}",
            time=WHEN,
            correlation_id="corr-1",
        )
        path.write_text(json.dumps(envelope.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
        print("wrote", path.name)


if __name__ == "__main__":
    main()
