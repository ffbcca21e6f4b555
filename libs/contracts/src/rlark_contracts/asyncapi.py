"""Builds the AsyncAPI 3.0 document of RLark's public topics from the registry (``python -m
rlark_contracts asyncapi``), so other teams can subscribe without reading our code."""

from __future__ import annotations

from typing import Any

from rlark_contracts.envelope import Envelope
from rlark_contracts.registry import EVENT_TYPES
from rlark_contracts.topics import AGENT_PRODUCER, TOPICS


def build() -> dict[str, Any]:
    channels: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for topic in TOPICS.values():
        names = sorted(t for t, (_, tp) in EVENT_TYPES.items() if tp == topic.name)
        channel_id = topic.name.replace(".", "-")
        channels[channel_id] = {
            "address": f"{topic.name}.{{cluster}}" if topic.per_cluster else topic.name,
            **(
                {"parameters": {"cluster": {"description": "the cluster: one topic each (ADR 0004)"}}}
                if topic.per_cluster
                else {}
            ),
            "description": f"{topic.description}. Key: {topic.key}. "
            + ("Compacted." if topic.compacted else "Retained by time.")
            + f" Written only by the {topic.producer} principal (events' source: "
            + ("agent/<cluster>" if topic.producer == AGENT_PRODUCER else topic.producer)
            + "); read by "
            + (", ".join(topic.consumers) or "nobody yet")
            + ".",
            "messages": {n.replace(".", "-"): {"$ref": f"#/components/messages/{n}"} for n in names},
        }
        operations[f"receive-{channel_id}"] = {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{channel_id}"},
        }
        for name in names:
            model = EVENT_TYPES[name][0]
            messages[name] = {
                "name": name,
                "contentType": "application/json",
                "summary": (model.__doc__ or name).strip().splitlines()[0],
                "payload": {
                    "allOf": [
                        {"$ref": "#/components/schemas/Envelope"},
                        {
                            "type": "object",
                            "properties": {
                                "type": {"const": name},
                                "data": model.model_json_schema(ref_template="#/components/schemas/{model}"),
                            },
                        },
                    ]
                },
            }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "RLark events",
            "version": "1",
            "description": "CloudEvents-style envelopes, JSON, one topic per producing aggregate. "
            "Delivery is at-least-once: deduplicate on `id`.",
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": {"Envelope": Envelope.model_json_schema()},
            "messages": messages,
            "securitySchemes": {
                "scram": {
                    "type": "scramSha512",
                    "description": "SASL/SCRAM-SHA-512; one principal per service and per cluster agent, "
                    "ACLs per topic (ADR 0004)",
                }
            },
        },
    }
