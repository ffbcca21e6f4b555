"""Where the CLI keeps the gateway URL and the API token: ``~/.config/rlark/config.json`` (mode 600).

``RLARK_URL`` and ``RLARK_TOKEN`` override the file, so scripts need no login step.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class CliConfig:
    url: str = "http://127.0.0.1:8080"
    token: str = ""
    username: str = ""


def config_path() -> Path:
    base = os.environ.get("RLARK_CONFIG_DIR") or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config"), "rlark"
    )
    return Path(base) / "config.json"


def load() -> CliConfig:
    config = CliConfig()
    path = config_path()
    if path.exists():
        stored = json.loads(path.read_text())
        config = CliConfig(**{k: v for k, v in stored.items() if k in CliConfig.__dataclass_fields__})
    config.url = os.environ.get("RLARK_URL") or config.url
    config.token = os.environ.get("RLARK_TOKEN") or config.token
    return config


def save(config: CliConfig) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(config), indent=2))
    temporary.chmod(0o600)
    temporary.replace(path)
    return path
