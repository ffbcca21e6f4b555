"""``python -m rlark_contracts.messages [DIR]``: write the catalogues to DIR (default: the console's
copy, ``web/src/i18n/server``), which the console's build reads (its Docker stage copies only web/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlark_contracts.messages import LANGUAGES, catalogue


def main(argv: list[str]) -> None:
    target = Path(argv[0] if argv else "web/src/i18n/server")
    target.mkdir(parents=True, exist_ok=True)
    for lang in LANGUAGES:
        body = json.dumps(dict(catalogue(lang)), ensure_ascii=False, indent=2) + "\n"
        (target / f"{lang}.json").write_text(body, encoding="utf-8")
        print(f"wrote {target / f'{lang}.json'} ({len(catalogue(lang))} messages)")


if __name__ == "__main__":
    main(sys.argv[1:])
