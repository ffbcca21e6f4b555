"""RLark's CSI node plugin over gRPC (ADR 0024): the Identity and Node services and the kubelet's registration
service on real Unix sockets, the mounts replaced by a recorder. What a kubelet sends is decoded as the spec's
field numbers say (a request encoded by hand below); bad requests fail INVALID_ARGUMENT naming the field, and
never quote a secret."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from rlark_tunnel_agent.csi import proto
from rlark_tunnel_agent.csi.node import CsiError, NodeService, Volume, _unescape, mounted
from rlark_tunnel_agent.csi.server import Plugin, registration_socket, start
from rlark_tunnel_agent.runtime.kubernetes.manifests import BUCKET_SECRET_KEYS

DRIVER = "s3.csi.rlark.io"
SECRET_KEY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
SECRETS = {
    "accessKeyID": "AKIAEXAMPLE",
    "secretAccessKey": SECRET_KEY,
    "endpoint": "http://127.0.0.1:7070",
    "region": "eu-west-1",
}
TARGET = "/var/lib/kubelet/pods/p-1/volumes/kubernetes.io~csi/mount-0/mount"


@dataclass
class Recorder:
    """Volumes that record what they were asked (and may refuse, as rclone would)."""

    published: list[Volume] = field(default_factory=list)
    unpublished: list[tuple[str, Path]] = field(default_factory=list)
    refuse: CsiError | None = None

    def publish(self, volume: Volume) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.published.append(volume)

    def unpublish(self, volume_id: str, target: Path) -> None:
        self.unpublished.append((volume_id, target))


@dataclass
class Running:
    plugin: Plugin
    volumes: Recorder
    kubelet_dir: Path
    csi: grpc.Channel
    registrar: grpc.Channel

    def call(self, method: proto.Method, request: Any, channel: grpc.Channel | None = None) -> Any:
        stub = (channel or self.csi).unary_unary(
            method.path,
            request_serializer=method.request.SerializeToString,
            response_deserializer=method.response.FromString,
        )
        return stub(request, timeout=10)

    def refused(self, method: proto.Method, request: Any) -> grpc.RpcError:
        with pytest.raises(grpc.RpcError) as caught:
            self.call(method, request)
        error: grpc.RpcError = caught.value
        return error


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (pytest's tmp_path may pass a Unix socket's 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="csi-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def running(short_dir: Path) -> Iterator[Running]:
    volumes = Recorder()
    kubelet_dir = short_dir / "kubelet"
    plugin = start(NodeService(DRIVER, "real-alpha-0", volumes), kubelet_dir)
    csi = grpc.insecure_channel(f"unix:{plugin.sockets[0]}")
    registrar = grpc.insecure_channel(f"unix:{plugin.sockets[1]}")
    try:
        yield Running(plugin, volumes, kubelet_dir, csi, registrar)
    finally:
        csi.close()
        registrar.close()
        plugin.stop(grace_s=1)


def publish(**overrides: Any) -> Any:
    request = proto.NODE_PUBLISH_VOLUME.request(
        volume_id="csi-0123abcd",
        target_path=TARGET,
        secrets=SECRETS,
        volume_context={"bucketName": "ckpt", "prefix": "exp/run-1/"},
    )
    request.volume_capability.mount.SetInParent()
    request.volume_capability.access_mode.mode = 1  # SINGLE_NODE_WRITER
    for name, value in overrides.items():
        if name in ("secrets", "volume_context"):
            getattr(request, name).clear()
            getattr(request, name).update(value)
        elif value is None:
            request.ClearField(name)
        else:
            setattr(request, name, value)
    return request


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _len(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _entry(number: int, key: str, value: str) -> bytes:
    return _len(number, _len(1, key.encode()) + _len(2, value.encode()))


def test_the_identity_and_node_services_answer_as_a_node_only_plugin(running: Running) -> None:
    info = running.call(proto.GET_PLUGIN_INFO, proto.GET_PLUGIN_INFO.request())
    assert (info.name, info.vendor_version) == (DRIVER, "0.1.0")
    assert not running.call(
        proto.GET_PLUGIN_CAPABILITIES, proto.GET_PLUGIN_CAPABILITIES.request()
    ).capabilities
    assert running.call(proto.PROBE, proto.PROBE.request()).ready.value is True
    assert not running.call(proto.NODE_GET_CAPABILITIES, proto.NODE_GET_CAPABILITIES.request()).capabilities
    assert running.call(proto.NODE_GET_INFO, proto.NODE_GET_INFO.request()).node_id == "real-alpha-0"
    assert running.plugin.sockets[0] == running.kubelet_dir / "plugins" / DRIVER / "csi.sock"
    assert oct(running.plugin.sockets[0].stat().st_mode & 0o777) == "0o600"


def test_the_kubelet_finds_the_plugin_in_its_registry_and_learns_the_csi_endpoint(running: Running) -> None:
    assert running.plugin.sockets[1] == registration_socket(running.kubelet_dir, DRIVER)
    assert running.plugin.sockets[1].parent == running.kubelet_dir / "plugins_registry"
    info = running.call(proto.GET_INFO, proto.GET_INFO.request(), running.registrar)
    assert (info.type, info.name, info.endpoint) == ("CSIPlugin", DRIVER, str(running.plugin.sockets[0]))
    assert list(info.supported_versions) == ["1.0.0"]
    notify = proto.NOTIFY_REGISTRATION_STATUS
    running.call(notify, notify.request(plugin_registered=False, error="bad version"), running.registrar)
    assert not running.plugin.registration.registered.is_set()
    assert running.plugin.registration.error == "bad version"
    running.call(notify, notify.request(plugin_registered=True), running.registrar)
    assert running.plugin.registration.registered.is_set()


def test_a_publish_encoded_as_the_spec_numbers_its_fields_mounts_the_bucket_and_prefix(
    running: Running,
) -> None:
    # NodePublishVolumeRequest as a kubelet sends it for an inline volume, encoded by hand with the spec's field
    # numbers: volume_id 1, target_path 4, volume_capability 5 (mount 2, access_mode 3 {mode 1}), readonly 6,
    # secrets 7, volume_context 8 — the agent's bucket Secret's keys (manifests.bucket_secrets).
    keys = {
        key: SECRETS[{"key_id": "accessKeyID", "access_key": "secretAccessKey"}.get(key, key)]
        for key in BUCKET_SECRET_KEYS
    }
    wire = _len(1, b"csi-0123abcd") + _len(4, TARGET.encode())
    wire += _len(5, _len(2, b"") + _len(3, b"\x08\x01")) + b"\x30\x01"
    wire += b"".join(_entry(7, k, v) for k, v in keys.items())
    wire += _entry(8, "bucketName", "ckpt") + _entry(8, "prefix", "exp/run-1/")
    raw = running.csi.unary_unary(proto.NODE_PUBLISH_VOLUME.path)(wire, timeout=10)
    assert raw == b""
    [volume] = running.volumes.published
    assert volume.volume_id == "csi-0123abcd"
    assert volume.target == Path(TARGET)
    assert (volume.location.bucket, volume.location.prefix) == ("ckpt", "exp/run-1")
    assert volume.read_only is True
    assert volume.credentials.access_key_id == "AKIAEXAMPLE"
    assert volume.credentials.secret_access_key.get_secret_value() == SECRET_KEY
    assert (volume.credentials.endpoint, volume.credentials.region) == ("http://127.0.0.1:7070", "eu-west-1")
    assert SECRET_KEY not in repr(volume)


def test_mountpoint_s_keys_serve_as_well_and_read_only_access_modes_mount_read_only(running: Running) -> None:
    mountpoint = {"key_id": "AKIAOTHER", "access_key": SECRET_KEY, "endpoint": "https://s3.lab.example"}
    running.call(
        proto.NODE_PUBLISH_VOLUME, publish(secrets=mountpoint, volume_context={"bucketName": "models"})
    )
    request = publish()
    request.volume_capability.access_mode.mode = proto.MULTI_NODE_READER_ONLY
    running.call(proto.NODE_PUBLISH_VOLUME, request)
    first, second = running.volumes.published
    assert first.credentials.access_key_id == "AKIAOTHER"
    assert first.credentials.region == "us-east-1"
    assert (first.location.bucket, first.location.prefix, first.read_only) == ("models", "", False)
    assert second.read_only is True


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ({"volume_id": ""}, "volume_id is required"),
        ({"target_path": ""}, "target_path is required"),
        ({"target_path": "relative/mount"}, "target_path must be an absolute path"),
        ({"target_path": "/var/lib/kubelet/../etc"}, "target_path must be an absolute path"),
        ({"volume_capability": None}, "volume_capability is required"),
        ({"volume_context": {"prefix": "exp"}}, "volume_context.bucketName is required"),
        ({"volume_context": {"bucketName": "Not_A_Bucket"}}, "volume_context.bucketName: the bucket must be"),
        ({"volume_context": {"bucketName": "ckpt", "prefix": "a/../b"}}, "volume_context.prefix: the prefix"),
        ({"secrets": {}}, "secrets.accessKeyID is required"),
        (
            {"secrets": {k: v for k, v in SECRETS.items() if k != "secretAccessKey"}},
            "secrets.secretAccessKey is",
        ),
        ({"secrets": {k: v for k, v in SECRETS.items() if k != "endpoint"}}, "secrets.endpoint is required"),
        (
            {"secrets": {**SECRETS, "endpoint": "ftp://s3.lab"}},
            "secrets: endpoint: must be an http:// or https://",
        ),
        (
            {"secrets": {**SECRETS, "secretAccessKey": "two words " + SECRET_KEY}},
            "secrets: secretAccessKey: must",
        ),
    ],
)
def test_a_bad_publish_is_invalid_argument_naming_the_field_and_never_a_secret(
    running: Running, overrides: dict[str, Any], said: str
) -> None:
    error = running.refused(proto.NODE_PUBLISH_VOLUME, publish(**overrides))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert said in (error.details() or ""), error.details()
    assert SECRET_KEY not in (error.details() or "")
    assert not running.volumes.published


def test_block_access_and_a_filesystem_type_are_refused(running: Running) -> None:
    block = publish()
    block.volume_capability.block.SetInParent()
    error = running.refused(proto.NODE_PUBLISH_VOLUME, block)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "only mount access" in (error.details() or "")
    typed = publish()
    typed.volume_capability.mount.fs_type = "ext4"
    error = running.refused(proto.NODE_PUBLISH_VOLUME, typed)
    assert "volume_capability.mount.fs_type" in (error.details() or "")


def test_a_refusal_of_the_mount_keeps_its_code_and_message(running: Running) -> None:
    running.volumes.refuse = CsiError(
        grpc.StatusCode.PERMISSION_DENIED, "refused: SignatureDoesNotMatch (HTTP 403)"
    )
    error = running.refused(proto.NODE_PUBLISH_VOLUME, publish())
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == "refused: SignatureDoesNotMatch (HTTP 403)"


def test_an_unexpected_failure_is_internal_and_says_no_more(running: Running) -> None:
    running.volumes.refuse = None

    def broken(_volume: Volume) -> None:
        raise RuntimeError(f"boom with {SECRET_KEY}")

    running.volumes.publish = broken  # type: ignore[method-assign]
    error = running.refused(proto.NODE_PUBLISH_VOLUME, publish())
    assert error.code() == grpc.StatusCode.INTERNAL
    assert error.details() == "NodePublishVolume failed; see the plugin's log"


def test_unpublish_needs_the_volume_and_its_path(running: Running) -> None:
    unpublish = proto.NODE_UNPUBLISH_VOLUME
    running.call(unpublish, unpublish.request(volume_id="csi-0123abcd", target_path=TARGET))
    assert running.volumes.unpublished == [("csi-0123abcd", Path(TARGET))]
    error = running.refused(unpublish, unpublish.request(volume_id="csi-0123abcd"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "target_path is required"
    error = running.refused(unpublish, unpublish.request(target_path=TARGET))
    assert error.details() == "volume_id is required"


def test_stopping_removes_both_sockets(short_dir: Path) -> None:
    plugin = start(NodeService(DRIVER, "n", Recorder()), short_dir)
    assert all(path.is_socket() for path in plugin.sockets)
    plugin.stop(grace_s=1)
    assert not any(path.exists() for path in plugin.sockets)


def test_a_socket_path_too_long_for_unix_sockets_is_refused_naming_it(tmp_path: Path) -> None:
    kubelet_dir = tmp_path / ("k" * 120)
    with pytest.raises(ValueError, match="at most 107 bytes"):
        start(NodeService(DRIVER, "n", Recorder()), kubelet_dir)


def test_mount_points_are_read_from_mountinfo(tmp_path: Path) -> None:
    assert mounted(Path("/proc"))
    assert not mounted(tmp_path)
    assert _unescape(r"/var/lib/kubelet/pods/a\040b/m\134n") == "/var/lib/kubelet/pods/a b/m\\n"
