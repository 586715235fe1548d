"""Write tokcost/specs/bundle.json: every built-in spec file parsed once, so that runs read no YAML (tokcost.bundle).

Run it after changing a built-in spec (a test fails while the bundle is stale; until then the changed file is read
from its YAML). `--check` writes nothing and exits 1 when the bundle differs from the files.
"""

from __future__ import annotations

import sys

from tokcost.bundle import BUNDLE, build


def main(argv: list[str]) -> int:
    text = build()
    if "--check" in argv:
        current = BUNDLE.read_text(encoding="utf-8") if BUNDLE.exists() else ""
        if current != text:
            print(f"{BUNDLE} is stale: run python scripts/build_bundle.py", file=sys.stderr)
            return 1
        return 0
    BUNDLE.write_text(text, encoding="utf-8")
    print(f"wrote {BUNDLE} ({len(text):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
