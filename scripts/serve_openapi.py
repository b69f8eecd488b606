"""The service's OpenAPI schema, checked in as docs/serve-openapi.json (tests/acceptance/test_serve_api.py checks
that a running server publishes exactly this at /openapi.json).

    python scripts/serve_openapi.py            # print it
    python scripts/serve_openapi.py --write    # write docs/serve-openapi.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pytest_cannbench.serve.app import openapi_schema

TARGET = Path(__file__).resolve().parent.parent / "docs" / "serve-openapi.json"


def main(argv: list[str]) -> int:
    text = json.dumps(openapi_schema(), indent=1, sort_keys=True) + "\n"
    if "--write" in argv:
        TARGET.write_text(text)
        print(f"wrote {TARGET}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
