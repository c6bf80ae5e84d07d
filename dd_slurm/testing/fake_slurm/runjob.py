"""Runs one fake batch job as slurmd does: a private copy of the script (mode 0700) executed
directly, so its `#!` line is obeyed; output to its log, exit code to a file."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys


def main() -> int:
    rc_file, script, out = sys.argv[1:4]
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    signal.signal(signal.SIGTERM, lambda *_: None)  # scancel signals the group: outlive the script, report it
    copy = os.path.splitext(rc_file)[0] + ".script"
    shutil.copyfile(script, copy)
    os.chmod(copy, 0o700)
    with open(out, "ab") as log:
        rc = subprocess.call([copy], stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)
    with open(rc_file, "w") as handle:
        handle.write(str(rc if rc >= 0 else 128 - rc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
