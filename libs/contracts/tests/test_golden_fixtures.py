"""Golden fixtures: every event type ever published still decodes with today's contracts."""

import json
from pathlib import Path

import pytest
from rlark_contracts import EVENT_TYPES, decode, encode

GOLDEN = Path(__file__).parent / "golden"
FIXTURES = sorted(GOLDEN.glob("*.json"))


def test_every_registered_event_type_has_a_golden_fixture() -> None:
    have = {p.stem for p in FIXTURES}
    missing = sorted(set(EVENT_TYPES) - have)
    assert not missing, f"add fixtures (python libs/contracts/tests/make_golden.py): {missing}"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_golden_fixture_decodes_into_its_data_model(path: Path) -> None:
    raw = path.read_bytes()
    envelope = decode(raw)
    assert envelope.type == path.stem
    payload = envelope.payload()
    # Re-encoding keeps every field the fixture had (additive changes only).
    again = json.loads(encode(envelope))
    assert again["data"] == json.loads(raw)["data"]
    assert payload.model_dump(mode="json").keys() >= envelope.data.keys()
