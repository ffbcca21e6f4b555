"""``python -m rlark_contracts asyncapi``: print the AsyncAPI document (JSON, valid YAML)."""

import json
import sys

from rlark_contracts.asyncapi import build

if sys.argv[1:] != ["asyncapi"]:
    sys.exit("usage: python -m rlark_contracts asyncapi")
print(json.dumps(build(), indent=1, sort_keys=True))
