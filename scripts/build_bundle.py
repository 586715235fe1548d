"""Write tokcost/specs/bundle.json and tokcost/validation/bundle.json: tokcost's own YAML files parsed once, so that
runs read no YAML (tokcost.bundle).

Run it after changing a built-in spec or the published data (a test fails while a bundle is stale; until then the
changed file is read from its YAML). `--check` writes nothing and exits 1 when a bundle differs from its files.
"""

from __future__ import annotations

import sys

from tokcost.bundle import SOURCES, build, bundle_path


def main(argv: list[str]) -> int:
    stale = 0
    for folder in SOURCES:
        path, text = bundle_path(folder), build(folder)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        if "--check" in argv:
            print(f"{path} is stale: run python scripts/build_bundle.py", file=sys.stderr)
            stale = 1
            continue
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path} ({len(text):,} bytes)")
    return stale


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
