"""``python -m environments.bfcl fetch``: download and unpack ``bfcl-eval`` (no dependencies) once."""

from __future__ import annotations

import sys

from environments.bfcl.package import VERSION, BfclMissing, fetch, is_fetched, package_root


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["fetch"], ["where"]):
        print("usage: python -m environments.bfcl fetch|where", file=sys.stderr)
        return 2
    if args == ["where"]:
        print(f"{package_root()} ({'present' if is_fetched() else 'absent'}; bfcl-eval {VERSION})")
        return 0
    try:
        print(fetch())
    except BfclMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
