"""One deployment bed for a run's test processes: the first user brings it up, a second user of the same run
takes it as it is, the last one out stops it; another run's bed is never reused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rlark_devinfra.k8s import deployment, deployment_sharing


class Bed:
    def __init__(self) -> None:
        self.ups = 0
        self.downs = 0

    def up(self) -> dict[str, str]:
        self.ups += 1
        return {"GATEWAY_URL": f"http://lab:{8000 + self.ups}"}

    def down(self) -> None:
        self.downs += 1


@pytest.fixture
def bed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bed:
    monkeypatch.setenv("RLARK_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("RLARK_KEEP_SERVERS", raising=False)
    fake = Bed()
    monkeypatch.setattr(deployment, "up", fake.up)
    monkeypatch.setattr(deployment, "down", fake.down)
    return fake


def as_process(monkeypatch: pytest.MonkeyPatch, pid: int) -> None:
    monkeypatch.setattr(os, "getpid", lambda: pid)


def test_a_second_process_of_the_run_takes_the_bed_as_it_is_and_the_last_out_stops_it(
    bed: Bed, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = os.getpid()
    with deployment_sharing.shared("run-1") as first:
        as_process(monkeypatch, 1)  # a live process: init stands in for xdist's other worker
        with deployment_sharing.shared("run-1") as second:
            assert second == first
        as_process(monkeypatch, mine)
        assert (bed.ups, bed.downs) == (1, 0)  # the first user still holds it
    assert (bed.ups, bed.downs) == (1, 1)


def test_the_last_user_stops_the_bed_even_if_the_first_is_still_listed(
    bed: Bed, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = os.getpid()
    with deployment_sharing.shared("run-1"):
        as_process(monkeypatch, 1)
        holder = deployment_sharing.shared("run-1")
        holder.__enter__()
        as_process(monkeypatch, mine)
    assert bed.downs == 0  # init's entry is live: it stops it when it leaves
    as_process(monkeypatch, 1)
    holder.__exit__(None, None, None)
    assert (bed.ups, bed.downs) == (1, 1)


def test_a_bed_of_another_run_is_brought_up_again_and_a_dead_users_entry_is_dropped(
    bed: Bed, tmp_path: Path
) -> None:
    with deployment_sharing.shared("run-1") as old:
        pass
    assert (bed.ups, bed.downs) == (1, 1)
    with deployment_sharing.shared("run-1"):  # the same run after the last one out: brought up afresh
        pass
    assert (bed.ups, bed.downs) == (2, 2)
    (tmp_path / "deploy-users" / "users" / "999999999").touch()  # a killed process's entry
    with deployment_sharing.shared("run-2") as new:
        assert new != old
    assert (bed.ups, bed.downs) == (3, 3)
    assert not (tmp_path / "deploy-users" / "values.json").exists()


def test_keep_servers_leaves_the_bed_running(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLARK_KEEP_SERVERS", "1")
    with deployment_sharing.shared("run-1"):
        pass
    assert (bed.ups, bed.downs) == (1, 0)


def test_the_values_file_is_readable_by_its_owner_only(bed: Bed, tmp_path: Path) -> None:
    with deployment_sharing.shared("run-1"):
        mode = (tmp_path / "deploy-users" / "values.json").stat().st_mode & 0o777
    assert mode == 0o600
