"""``/api/docs``: Swagger UI for ``/api/openapi.json``, every asset served by the gateway itself.

The Swagger UI files come from the ``fastapi-offline`` package (its ``static`` folder: swagger-ui-dist 5);
the page's start-up script is ``docs_assets/init.js``, a file rather than an inline script, so the
gateway's CSP (``script-src 'self'``) holds on this page too. No CDN is contacted.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from rlark_platform.errors import ApiError
from starlette.responses import FileResponse, HTMLResponse, Response

SWAGGER_DIR = Path(fastapi_offline.__file__).parent / "static"
OWN_DIR = Path(__file__).parent / "docs_assets"
ASSETS = {
    "swagger-ui-bundle.js": SWAGGER_DIR / "swagger-ui-bundle.js",
    "swagger-ui.css": SWAGGER_DIR / "swagger-ui.css",
    "favicon.png": SWAGGER_DIR / "favicon.png",
    "init.js": OWN_DIR / "init.js",
}
_CACHE = {"Cache-Control": "public, max-age=3600"}

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>{title}</title>
<link rel="stylesheet" href="/api/docs/swagger-ui.css">
<link rel="icon" href="/api/docs/favicon.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/api/docs/swagger-ui-bundle.js"></script>
<script src="/api/docs/init.js"></script>
</body>
</html>
"""


def add_docs_routes(app: FastAPI) -> None:
    page = PAGE.format(title=f"{app.title} — docs")

    async def docs() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-cache"})

    async def asset(name: str) -> Response:
        path = ASSETS.get(name)
        if path is None:
            raise ApiError(404, "not_found", f"no documentation asset {name}")
        return FileResponse(path, headers=_CACHE)

    app.add_api_route("/api/docs", docs, methods=["GET"], include_in_schema=False)
    app.add_api_route("/api/docs/{name}", asset, methods=["GET"], include_in_schema=False)
