"""``rlark labels``: every node label key and value, with how many nodes carry it — what a job's node
selector can use (e.g. ``rlark.io/gpu-model=A100``)."""

from __future__ import annotations

from typing import Annotated

import typer

from rlark_cli.client import Gateway
from rlark_cli.output import Format, OutputOpt, emit


def register(app: typer.Typer) -> None:
    @app.command("labels")
    def labels(
        cluster: Annotated[
            str | None, typer.Option("--cluster", "-c", help="Only nodes of this cluster")
        ] = None,
        output: OutputOpt = Format.table,
    ) -> None:
        """List node labels (key, value, number of nodes) for writing node selectors."""
        catalog = Gateway().get("/api/v1/labels", params={"cluster": cluster} if cluster else None)
        if output is not Format.table:
            emit(catalog, output)
            return
        rows = [
            {
                "selector": f"{key['key']}={value['value']}",
                "key": key["key"],
                "value": value["value"],
                "nodes": value["nodes"],
            }
            for key in catalog["items"]
            for value in key["values"]
        ]
        emit(rows, output, [("KEY", "key"), ("VALUE", "value"), ("NODES", "nodes"), ("SELECTOR", "selector")])
