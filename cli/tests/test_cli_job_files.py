"""`rlark jobs download`: which worker holds a path when none is named, and the saved file's name taken from
the gateway's Content-Disposition, never a path that leaves the chosen directory (no gateway needed)."""

from __future__ import annotations

from rlark_cli.commands.job_files import filename_of, holders, tool_url

LISTING = {
    "files": [
        {"worker": "j-actor-0", "path": "/out/ckpt/model.bin", "size": 1, "mtime": 1.0},
        {"worker": "j-rollout-0", "path": "/out/ckpt/model.bin", "size": 1, "mtime": 1.0},
        {"worker": "j-actor-0", "path": "/out/metrics.txt", "size": 1, "mtime": 1.0},
        {"worker": "j-rollout-0", "path": "/out/ckpt-old/x", "size": 1, "mtime": 1.0},
    ]
}


def test_a_path_is_found_on_the_workers_whose_outputs_hold_it() -> None:
    assert holders(LISTING, "/out/metrics.txt") == ["j-actor-0"]
    assert holders(LISTING, "/out/ckpt/") == ["j-actor-0", "j-rollout-0"]
    assert holders(LISTING, "/out/ckpt-old") == ["j-rollout-0"]
    assert holders(LISTING, "/out/missing") == []


def test_the_saved_name_is_the_servers_utf8_name_reduced_to_one_component() -> None:
    assert filename_of("attachment; filename=\"model.bin\"; filename*=UTF-8''model.bin", "x") == "model.bin"
    assert (
        filename_of("attachment; filename=\"__.txt\"; filename*=UTF-8''%E6%A8%A1%E5%9E%8B.txt", "x")
        == "模型.txt"
    )
    assert filename_of("attachment; filename*=UTF-8''..%2F..%2Fetc%2Fpasswd", "x") == "passwd"
    assert filename_of('attachment; filename=".."', "download") == "download"
    assert filename_of("", "download") == "download"


def test_a_tools_url_is_the_gateways_route_that_opens_it_for_the_job() -> None:
    assert (
        tool_url("https://rlark.example/", "job-1", "tensorboard")
        == "https://rlark.example/api/v1/jobs/job-1/tools/tensorboard/"
    )
    assert (
        tool_url("https://rlark.example", "job/2", "ray-dashboard")
        == "https://rlark.example/api/v1/jobs/job%2F2/tools/ray-dashboard/"
    )
