import json
from pathlib import Path

from rlark_contracts import EVENT_TYPES
from rlark_contracts.asyncapi import build

DOC = Path(__file__).resolve().parents[3] / "docs" / "asyncapi.json"


def test_published_asyncapi_document_is_current() -> None:
    assert json.loads(DOC.read_text()) == json.loads(json.dumps(build())), (
        "regenerate: uv run python -m rlark_contracts asyncapi > docs/asyncapi.json"
    )


def test_asyncapi_lists_every_event_type() -> None:
    assert set(build()["components"]["messages"]) == set(EVENT_TYPES)
