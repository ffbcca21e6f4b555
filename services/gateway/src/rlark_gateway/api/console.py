"""The web console: static files from ``RLARK_WEB_DIR`` (default ``web/dist`` of the checkout) at ``/``.

Unknown paths outside ``/api`` get ``index.html`` (the single-page app routes them); a missing file with
a static extension or under ``/assets/`` is a 404. Hashed assets are cached for a year, ``index.html``
never. When the console is not built, every page explains how to build it.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response

from rlark_gateway.settings import GatewaySettings

NOT_BUILT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>RLark</title>
<style>body{font-family:system-ui,sans-serif;max-width:42rem;margin:4rem auto;line-height:1.5}
code,pre{background:#f3f3f3;padding:.1rem .3rem}</style></head>
<body><h1>RLark</h1>
<p>The web console is not built, so this gateway serves only the API
(<a href="/api/docs">/api/docs</a>).</p>
<p>Build it, then reload this page:</p>
<pre>cd web &amp;&amp; npm ci &amp;&amp; npm run build</pre>
<p>or point <code>RLARK_WEB_DIR</code> at a directory holding a built console
(<code>index.html</code>) and restart the gateway.</p>
</body></html>
"""

_STATIC_SUFFIXES = frozenset(
    {
        ".js",
        ".mjs",
        ".css",
        ".map",
        ".json",
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".svg",
        ".ico",
        ".webp",
        ".woff",
        ".woff2",
        ".ttf",
        ".txt",
        ".wasm",
    }
)
_NO_CACHE = {"Cache-Control": "no-cache"}
_IMMUTABLE = {"Cache-Control": "public, max-age=31536000, immutable"}


def _file(web_dir: Path, path: str) -> Path | None:
    """The file under ``web_dir`` that ``path`` names, never one outside it."""
    if not path:
        return None
    root = web_dir.resolve()
    candidate = (root / path).resolve()
    if candidate.is_relative_to(root) and candidate.is_file():
        return candidate
    return None


def add_console_routes(app: FastAPI, settings: GatewaySettings) -> None:
    async def console(path: str) -> Response:
        web_dir = settings.resolved_web_dir()  # per request: a console built later shows up
        if web_dir is None:
            return HTMLResponse(NOT_BUILT_PAGE, headers=_NO_CACHE)
        found = _file(web_dir, path)
        if found is not None:
            hashed = found.parent.name == "assets"
            return FileResponse(found, headers=_IMMUTABLE if hashed else _NO_CACHE)
        if path.startswith("assets/") or Path(path).suffix.lower() in _STATIC_SUFFIXES:
            return PlainTextResponse("not found", status_code=404)
        return FileResponse(web_dir / "index.html", headers=_NO_CACHE)

    app.add_api_route("/{path:path}", console, methods=["GET"], include_in_schema=False)
