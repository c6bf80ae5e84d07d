"""`python -m dd_slurm.gateway CONFIG.json` (or the bundle's `entry.py _gateway CONFIG.json`)."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from dd_slurm.gateway.config import ConfigError, load
    from dd_slurm.gateway.service import EXIT_CONFIG, serve

    if len(argv) != 1:
        print("error: usage: python -m dd_slurm.gateway CONFIG.json", file=sys.stderr)
        return EXIT_CONFIG
    try:
        config = load(Path(argv[0]).read_text())
    except OSError as err:
        print(f"error: {argv[0]}: cannot read ({err.strerror})", file=sys.stderr)
        return EXIT_CONFIG
    except ConfigError as err:
        print(f"error: {argv[0]}: {err}", file=sys.stderr)
        return EXIT_CONFIG
    return serve(config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
