"""The wire types of RLark's CSI node plugin, built at run time from descriptors written here (no protoc).

Two gRPC APIs, only the subset the node plugin serves, with the package, service, method and message names and
the field numbers of their own definitions:

- the Container Storage Interface v1 (``csi.v1``, the spec's ``csi.proto``): ``Identity`` (GetPluginInfo,
  GetPluginCapabilities, Probe) and ``Node`` (NodeGetCapabilities, NodeGetInfo, NodePublishVolume,
  NodeUnpublishVolume). Fields this plugin never reads or sets are left out (protobuf skips unknown fields, so
  a kubelet sending them is understood); ``ProbeResponse.ready`` is a ``google.protobuf.BoolValue`` as there.
- the kubelet's plugin registration API (``pluginregistration``, k8s.io/kubelet
  ``pkg/apis/pluginregistration/v1/api.proto``): ``Registration`` (GetInfo, NotifyRegistrationStatus), served on
  the socket the kubelet finds in its ``plugins_registry`` directory.

The message classes live in a descriptor pool of their own (never the process's default pool, where another
library may have registered ``csi.v1`` differently).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

_F = descriptor_pb2.FieldDescriptorProto
STRING, BOOL, INT64, MESSAGE, ENUM = (
    _F.TYPE_STRING,
    _F.TYPE_BOOL,
    _F.TYPE_INT64,
    _F.TYPE_MESSAGE,
    _F.TYPE_ENUM,
)

CSI_PACKAGE = "csi.v1"
IDENTITY_SERVICE = f"{CSI_PACKAGE}.Identity"
NODE_SERVICE = f"{CSI_PACKAGE}.Node"
REGISTRATION_PACKAGE = "pluginregistration"
REGISTRATION_SERVICE = f"{REGISTRATION_PACKAGE}.Registration"

# csi.v1 enums (values as in the spec).
SINGLE_NODE_READER_ONLY = 2
MULTI_NODE_READER_ONLY = 3
READ_ONLY_MODES = frozenset({SINGLE_NODE_READER_ONLY, MULTI_NODE_READER_ONLY})


def _field(
    name: str, number: int, kind: int, *, repeated: bool = False, type_name: str | None = None
) -> descriptor_pb2.FieldDescriptorProto:
    field = _F(
        name=name, number=number, type=kind, label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    )
    if type_name is not None:
        field.type_name = type_name
    return field


def _message(
    name: str,
    *fields: descriptor_pb2.FieldDescriptorProto,
    nested: tuple[descriptor_pb2.DescriptorProto, ...] = (),
    enums: tuple[descriptor_pb2.EnumDescriptorProto, ...] = (),
) -> descriptor_pb2.DescriptorProto:
    message = descriptor_pb2.DescriptorProto(name=name)
    message.field.extend(fields)
    message.nested_type.extend(nested)
    message.enum_type.extend(enums)
    return message


def _enum(name: str, *values: str) -> descriptor_pb2.EnumDescriptorProto:
    enum = descriptor_pb2.EnumDescriptorProto(name=name)
    for number, value in enumerate(values):
        enum.value.add(name=value, number=number)
    return enum


def _with_maps(
    message: descriptor_pb2.DescriptorProto, full_name: str, maps: dict[str, int]
) -> descriptor_pb2.DescriptorProto:
    """Add ``map<string, string>`` fields as proto3 declares them: a repeated nested ``<Name>Entry``
    message (key 1, value 2) marked ``map_entry``."""
    for name, number in maps.items():
        entry_name = "".join(part.capitalize() for part in name.split("_")) + "Entry"
        entry = _message(entry_name, _field("key", 1, STRING), _field("value", 2, STRING))
        entry.options.map_entry = True
        message.nested_type.append(entry)
        message.field.append(
            _field(name, number, MESSAGE, repeated=True, type_name=f".{full_name}.{entry_name}")
        )
    return message


def _csi_file() -> descriptor_pb2.FileDescriptorProto:
    p = f".{CSI_PACKAGE}"
    capability = _message(
        "VolumeCapability",
        _field("block", 1, MESSAGE, type_name=f"{p}.VolumeCapability.BlockVolume"),
        _field("mount", 2, MESSAGE, type_name=f"{p}.VolumeCapability.MountVolume"),
        _field("access_mode", 3, MESSAGE, type_name=f"{p}.VolumeCapability.AccessMode"),
        nested=(
            _message("BlockVolume"),
            _message(
                "MountVolume", _field("fs_type", 1, STRING), _field("mount_flags", 2, STRING, repeated=True)
            ),
            _message(
                "AccessMode",
                _field("mode", 1, ENUM, type_name=f"{p}.VolumeCapability.AccessMode.Mode"),
                enums=(
                    _enum(
                        "Mode",
                        "UNKNOWN",
                        "SINGLE_NODE_WRITER",
                        "SINGLE_NODE_READER_ONLY",
                        "MULTI_NODE_READER_ONLY",
                        "MULTI_NODE_SINGLE_WRITER",
                        "MULTI_NODE_MULTI_WRITER",
                    ),
                ),
            ),
        ),
    )
    # The oneof access_type {block, mount}: index 0 of the message's oneofs.
    capability.oneof_decl.add(name="access_type")
    capability.field[0].oneof_index = 0
    capability.field[1].oneof_index = 0

    plugin_capability = _message(
        "PluginCapability",
        _field("service", 1, MESSAGE, type_name=f"{p}.PluginCapability.Service"),
        nested=(
            _message(
                "Service",
                _field("type", 1, ENUM, type_name=f"{p}.PluginCapability.Service.Type"),
                enums=(_enum("Type", "UNKNOWN", "CONTROLLER_SERVICE", "VOLUME_ACCESSIBILITY_CONSTRAINTS"),),
            ),
        ),
    )
    node_capability = _message(
        "NodeServiceCapability",
        _field("rpc", 1, MESSAGE, type_name=f"{p}.NodeServiceCapability.RPC"),
        nested=(
            _message(
                "RPC",
                _field("type", 1, ENUM, type_name=f"{p}.NodeServiceCapability.RPC.Type"),
                enums=(_enum("Type", "UNKNOWN", "STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS"),),
            ),
        ),
    )
    messages = [
        _message("GetPluginInfoRequest"),
        _with_maps(
            _message("GetPluginInfoResponse", _field("name", 1, STRING), _field("vendor_version", 2, STRING)),
            f"{CSI_PACKAGE}.GetPluginInfoResponse",
            {"manifest": 3},
        ),
        _message("GetPluginCapabilitiesRequest"),
        _message(
            "GetPluginCapabilitiesResponse",
            _field("capabilities", 1, MESSAGE, repeated=True, type_name=f"{p}.PluginCapability"),
        ),
        plugin_capability,
        _message("ProbeRequest"),
        _message("ProbeResponse", _field("ready", 1, MESSAGE, type_name=".google.protobuf.BoolValue")),
        capability,
        _with_maps(
            _message(
                "NodePublishVolumeRequest",
                _field("volume_id", 1, STRING),
                _field("staging_target_path", 3, STRING),
                _field("target_path", 4, STRING),
                _field("volume_capability", 5, MESSAGE, type_name=f"{p}.VolumeCapability"),
                _field("readonly", 6, BOOL),
            ),
            f"{CSI_PACKAGE}.NodePublishVolumeRequest",
            {"publish_context": 2, "secrets": 7, "volume_context": 8},
        ),
        _message("NodePublishVolumeResponse"),
        _message(
            "NodeUnpublishVolumeRequest", _field("volume_id", 1, STRING), _field("target_path", 2, STRING)
        ),
        _message("NodeUnpublishVolumeResponse"),
        _message("NodeGetCapabilitiesRequest"),
        _message(
            "NodeGetCapabilitiesResponse",
            _field("capabilities", 1, MESSAGE, repeated=True, type_name=f"{p}.NodeServiceCapability"),
        ),
        node_capability,
        _message("NodeGetInfoRequest"),
        _message(
            "NodeGetInfoResponse", _field("node_id", 1, STRING), _field("max_volumes_per_node", 2, INT64)
        ),
    ]
    file = descriptor_pb2.FileDescriptorProto(
        name="rlark/csi/v1/csi.proto", package=CSI_PACKAGE, syntax="proto3", dependency=[_WRAPPERS]
    )
    file.message_type.extend(messages)
    return file


def _registration_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="rlark/csi/pluginregistration/api.proto", package=REGISTRATION_PACKAGE, syntax="proto3"
    )
    file.message_type.extend(
        [
            _message(
                "PluginInfo",
                _field("type", 1, STRING),
                _field("name", 2, STRING),
                _field("endpoint", 3, STRING),
                _field("supported_versions", 4, STRING, repeated=True),
            ),
            _message("RegistrationStatus", _field("plugin_registered", 1, BOOL), _field("error", 2, STRING)),
            _message("RegistrationStatusResponse"),
            _message("InfoRequest"),
        ]
    )
    return file


_WRAPPERS = wrappers_pb2.DESCRIPTOR.name


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    wrappers = descriptor_pb2.FileDescriptorProto()
    wrappers_pb2.DESCRIPTOR.CopyToProto(wrappers)
    pool.Add(wrappers)
    pool.Add(_csi_file())
    pool.Add(_registration_file())
    return pool


POOL = _build_pool()


def message_class(full_name: str) -> Any:
    """The generated class of one message of the pool (``csi.v1.NodePublishVolumeRequest``)."""
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


@dataclass(frozen=True, slots=True)
class Method:
    """One unary gRPC method: its service, name and message classes."""

    service: str
    name: str
    request: Any
    response: Any

    @property
    def path(self) -> str:
        """The method's HTTP/2 path, ``/csi.v1.Node/NodePublishVolume``."""
        return f"/{self.service}/{self.name}"


def _method(service: str, name: str, request: str, response: str) -> Method:
    package = service.rsplit(".", 1)[0]
    return Method(
        service, name, message_class(f"{package}.{request}"), message_class(f"{package}.{response}")
    )


GET_PLUGIN_INFO = _method(IDENTITY_SERVICE, "GetPluginInfo", "GetPluginInfoRequest", "GetPluginInfoResponse")
GET_PLUGIN_CAPABILITIES = _method(
    IDENTITY_SERVICE, "GetPluginCapabilities", "GetPluginCapabilitiesRequest", "GetPluginCapabilitiesResponse"
)
PROBE = _method(IDENTITY_SERVICE, "Probe", "ProbeRequest", "ProbeResponse")
NODE_GET_CAPABILITIES = _method(
    NODE_SERVICE, "NodeGetCapabilities", "NodeGetCapabilitiesRequest", "NodeGetCapabilitiesResponse"
)
NODE_GET_INFO = _method(NODE_SERVICE, "NodeGetInfo", "NodeGetInfoRequest", "NodeGetInfoResponse")
NODE_PUBLISH_VOLUME = _method(
    NODE_SERVICE, "NodePublishVolume", "NodePublishVolumeRequest", "NodePublishVolumeResponse"
)
NODE_UNPUBLISH_VOLUME = _method(
    NODE_SERVICE, "NodeUnpublishVolume", "NodeUnpublishVolumeRequest", "NodeUnpublishVolumeResponse"
)
GET_INFO = _method(REGISTRATION_SERVICE, "GetInfo", "InfoRequest", "PluginInfo")
NOTIFY_REGISTRATION_STATUS = _method(
    REGISTRATION_SERVICE, "NotifyRegistrationStatus", "RegistrationStatus", "RegistrationStatusResponse"
)
BOOL_VALUE = message_class("google.protobuf.BoolValue")
