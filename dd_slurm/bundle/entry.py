"""The bundle's entry point (copied to BUNDLE/entry.py). Standard library only, and in this order:

1. record SIGTERM, SIGINT, SIGUSR1 and SIGHUP (the rendered boot has usually done so already, as
   its first instruction; the SignalGate adopts what was recorded);
2. verify the manifest against the digest the caller expects and every file against the manifest,
   before anything of the bundle is imported;
3. only then run the command: `run` and `_gateway` with lib/ on sys.path (the whole bundle was
   verified: no file there is unlisted); the short on-node commands with lib/ NOT on sys.path, their
   few modules served by an import hook from bytes checked against the manifest (only those files
   were verified, so nothing else of lib/ may be reachable, least of all a stdlib-shadowing name).

The rendered boot checks this file's own sha256 before running it, so the chain of trust is:
the attempt's script (rendered when staged) -> entry.py -> manifest.json -> every file, bytecode
included. Imported by manifest.py for `verify` and `manifest_digest`, it does nothing else.
"""

import _signal  # the C module: `signal` would import enum first

RECORDED = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGUSR1, _signal.SIGHUP)
if __name__ == "__main__" and "_DD_SLURM_EARLY_SIGNALS" not in globals():  # run without the boot
    _DD_SLURM_EARLY_SIGNALS: list = []
    for _signo in RECORDED:
        _signal.signal(_signo, lambda signo, _frame: _DD_SLURM_EARLY_SIGNALS.append(signo))
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, RECORDED)  # held while blocked: delivered now, recorded

import _imp  # noqa: E402 - after the handlers, on purpose
import hashlib  # noqa: E402
import json  # noqa: E402
import marshal  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

# importlib's own, loaded at start-up (importlib.machinery would import warnings too).
from _frozen_importlib import ModuleSpec  # noqa: E402
from _frozen_importlib_external import MAGIC_NUMBER  # noqa: E402

TYPE_CHECKING = False  # typing costs milliseconds per step; mypy reads this name as True
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import CodeType, ModuleType

MANIFEST_NAME = "manifest.json"
# Attempt-dir names for the refusal record, before anything of the bundle may be imported (the
# same as store/attempt_files' names; a unit test compares them).
ATTEMPT_FILES = {"JOURNAL": "journal.jsonl", "SUPERVISOR_LOCK": "supervisor.lock", "CLEANUP": "cleanup.json"}
FORMAT = 2
EXIT_UNVERIFIED = 4
# What the short on-node commands (_step, _probe, _identity, _scan, _stage) import from the bundle: all they
# verify, all they may import. The long-lived gateway (_gateway) verifies the whole bundle, as `run` does.
NODE_MODULES = ("dd_slurm", "dd_slurm.runtime", "dd_slurm.runtime.node", "dd_slurm.runtime.node.stepexec",
                "dd_slurm.runtime.node.procfs", "dd_slurm.runtime.node.leftover_scan", "dd_slurm.runtime.node.listeners",
                "dd_slurm.runtime.node.weights", "dd_slurm.runtime.node.port_claims", "dd_slurm.plan",
                "dd_slurm.plan.fields", "dd_slurm.store", "dd_slurm.store.atomic", "dd_slurm.store.attempt_files")
NODE_PACKAGES = ("dd_slurm", "dd_slurm.runtime", "dd_slurm.runtime.node", "dd_slurm.plan", "dd_slurm.store")
GATEWAY_COMMAND = "_gateway"
_HEX = frozenset("0123456789abcdef")


def manifest_digest(manifest: dict) -> str:
    covered = {"format": manifest["format"], "version": manifest["version"], "files": manifest["files"]}
    return hashlib.sha256(json.dumps(covered, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX


def _shape_problem(manifest: object) -> str:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return f"{MANIFEST_NAME}: not a format {FORMAT} manifest"
    files = manifest.get("files")
    if not isinstance(files, dict) or not isinstance(manifest.get("version"), str):
        return f"{MANIFEST_NAME}: files/version missing"
    for rel, digest in files.items():
        parts = rel.split("/")
        if rel.startswith("/") or ".." in parts or "" in parts or not _is_sha256(digest):
            return f"{MANIFEST_NAME}: bad entry {rel[:80]!r}"
    return ""


def module_paths(name: str) -> tuple:
    """(source, this interpreter's bytecode, package dir or "") of a node module, bundle-relative."""
    parts = name.split(".")
    package = name in NODE_PACKAGES
    directory = "/".join(["lib", *parts]) if package else "/".join(["lib", *parts[:-1]])
    stem = "__init__" if package else parts[-1]
    pyc = f"{directory}/__pycache__/{stem}.{sys.implementation.cache_tag}.pyc"
    return f"{directory}/{stem}.py", pyc, directory if package else ""


def module_files(modules: tuple) -> set:
    """Bundle-relative source and bytecode paths of modules (packages as their __init__)."""
    return {rel for name in modules for rel in module_paths(name)[:2]}


def verify(bundle_dir: str, expected_digest: str = "", only: frozenset = frozenset()) -> list:
    """Problems found (empty when intact): the manifest's digest against its contents and the
    expected digest, every listed file's sha256, and no file that the manifest does not list.
    `only`: check just these files (and that none of them exists unlisted)."""
    return verified_files(bundle_dir, expected_digest, only)[1]


def verified_files(bundle_dir: str, expected_digest: str = "", only: frozenset = frozenset()) -> tuple:
    """(the manifest's files: path -> sha256, problems): `verify`, and the listing it checked."""
    try:
        with open(os.path.join(bundle_dir, MANIFEST_NAME), "rb") as handle:
            manifest = json.loads(handle.read())
    except (OSError, ValueError) as err:
        return {}, [f"{MANIFEST_NAME}: unreadable ({err})"]
    shape = _shape_problem(manifest)
    if shape:
        return {}, [shape]
    problems = []
    if manifest_digest(manifest) != manifest.get("digest"):
        problems.append(f"{MANIFEST_NAME}: digest does not match its contents")
    if expected_digest and manifest.get("digest") != expected_digest:
        problems.append(f"{MANIFEST_NAME}: digest {manifest.get('digest')} is not the expected {expected_digest}")
    return manifest["files"], problems + _file_problems(bundle_dir, manifest["files"], only)


def _file_problems(bundle_dir: str, files: dict, only: frozenset) -> list:
    problems = []
    for rel, digest in files.items():
        if only and rel not in only:
            continue
        try:
            with open(os.path.join(bundle_dir, rel), "rb") as handle:
                actual = hashlib.sha256(handle.read()).hexdigest()
        except OSError:
            problems.append(f"{rel}: missing")
            continue
        if actual != digest:
            problems.append(f"{rel}: checksum mismatch")
    listed = set(files) | {MANIFEST_NAME}
    if only:
        return problems + [f"{rel}: not in the manifest" for rel in sorted(only - listed)
                           if os.path.exists(os.path.join(bundle_dir, rel))]
    for root, _dirs, names in os.walk(bundle_dir):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), bundle_dir)
            if rel not in listed:
                problems.append(f"{rel}: not in the manifest")
    return problems


class OnlyVerified:
    """The import hook of on-node commands, whose sys.path holds no bundle dir: the modules of
    `allowed` load from the bundle, each from bytes whose sha256 the verified manifest (`digests`)
    lists, checked again as they are read; no other dd_slurm module loads, and every other name is
    left to the standard library's own finders."""

    def __init__(self, bundle_dir: str, allowed: tuple, digests: dict) -> None:
        self.bundle_dir, self.allowed, self.digests = bundle_dir, allowed, digests

    def find_spec(self, name: str, _path: "Sequence[str] | None" = None,
                  _target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if name != "dd_slurm" and not name.startswith("dd_slurm."):
            return None
        if name not in self.allowed:
            raise ImportError(f"{name} is not verified for on-node commands (see entry.NODE_MODULES)")
        source, _bytecode, package = module_paths(name)
        origin = os.path.join(self.bundle_dir, source)
        spec = ModuleSpec(name, self, origin=origin, is_package=bool(package))  # type: ignore[arg-type]  # by protocol
        spec.has_location = True
        if package:
            spec.submodule_search_locations = [os.path.join(self.bundle_dir, package)]
        return spec

    def create_module(self, _spec: object) -> None:
        return None  # the default module

    def exec_module(self, module: "ModuleType") -> None:
        exec(self.code(module.__name__), module.__dict__)  # noqa: S102 - bytes checked just now

    def code(self, name: str) -> "CodeType":
        """The module's code: its listed bytecode for this interpreter, else its source."""
        source, bytecode, _package = module_paths(name)
        origin = os.path.join(self.bundle_dir, source)
        if bytecode in self.digests:
            data = self._checked(bytecode)
            if data[:4] == MAGIC_NUMBER:
                code = marshal.loads(data[16:])  # noqa: S302 - the bytes the verified manifest lists
                _imp._fix_co_filename(code, origin)  # type: ignore[attr-defined]  # as importlib does
                return code
        return compile(self._checked(source), origin, "exec", dont_inherit=True)

    def _checked(self, rel: str) -> bytes:
        with open(os.path.join(self.bundle_dir, rel), "rb") as handle:
            data = handle.read()
        if hashlib.sha256(data).hexdigest() != self.digests.get(rel):
            raise ImportError(f"bundle {self.bundle_dir}: {rel}: checksum mismatch, not loaded")
        return data


def _record_refusal(attempt_dir: str, problem: str) -> None:
    """An attempt nobody has started yet ends `failed/bundle_checksum` without running any bundle
    code: the same journal lines and report the runtime writes (an attempt already under way, or
    under supervision, is left alone)."""
    import time
    from datetime import datetime, timezone

    journal = os.path.join(attempt_dir, ATTEMPT_FILES["JOURNAL"])
    lock = os.path.join(attempt_dir, ATTEMPT_FILES["SUPERVISOR_LOCK"])
    if os.path.exists(journal):
        return
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        return
    try:
        now = time.time()
        stamp = datetime.fromtimestamp(now, tz=timezone.utc).isoformat(timespec="milliseconds")
        common = {"kind": "transition", "outcome": "failed", "reason": "bundle_checksum", "detail": problem,
                  "time": stamp, "ts": now}
        lines = [dict(common, seq=0, trigger="fail", to="cleanup", **{"from": "staged"}),
                 dict(common, seq=1, trigger="finish", to="done", **{"from": "cleanup"})]
        report = {"runs": 1, "outcome": "failed", "reason": "bundle_checksum", "processes": [], "problems": [],
                  "leftovers_found": [], "leftovers_killed": [], "leftovers_after": [], "methods": {},
                  "notes": ["the bundle failed verification: nothing of it ran and nothing was started"],
                  "verdict": "clean", "seconds": 0.0, "finished": True}
        _write(os.path.join(attempt_dir, ATTEMPT_FILES["CLEANUP"]), json.dumps(report, indent=1, sort_keys=True) + "\n")
        _write(journal, "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    finally:
        os.close(fd)
        os.unlink(lock)


def _write(path: str, text: str) -> None:
    """store/atomic.write_atomic's way (this file may not import it): a new temp file at a name
    nobody can predict, never through a symlink, renamed into place; removed if anything fails."""
    tmp = f"{path}.{os.urandom(8).hex()}.entry.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with open(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _expected_digest(argv: list) -> str:
    passed = globals().get("_DD_SLURM_BUNDLE_DIGEST") or ""
    if "--bundle-digest" in argv[:-1]:
        passed = passed or argv[argv.index("--bundle-digest") + 1]
    return passed


def main(argv: list) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    expected = _expected_digest(argv)
    node_command = len(argv) > 1 and argv[1].startswith("_") and argv[1] != GATEWAY_COMMAND
    # On-node commands verify the manifest and the few modules they may import (and import no other).
    only = frozenset(module_files(NODE_MODULES)) if node_command else frozenset()
    digests, problems = verified_files(here, expected, only) if expected else ({}, ["no expected bundle digest was given"])
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        message = f"bundle {here}: {problems[0]}{more}"
        if len(argv) > 2 and argv[1] in ("run", "advance"):
            _record_refusal(argv[2], message)
        print(f"error: {message}; nothing of the bundle ran", file=sys.stderr, flush=True)
        return EXIT_UNVERIFIED
    if node_command:
        sys.meta_path.insert(0, OnlyVerified(here, NODE_MODULES, digests))
        from dd_slurm.runtime.node.stepexec import main as node_main

        return node_main(argv[1:], _DD_SLURM_EARLY_SIGNALS)
    sys.path.insert(0, os.path.join(here, "lib"))
    if len(argv) > 1 and argv[1] == GATEWAY_COMMAND:
        from dd_slurm.gateway.__main__ import main as gateway_main

        return gateway_main(argv[2:], _DD_SLURM_EARLY_SIGNALS)
    from dd_slurm.console import main as console_main  # `run` without importing click

    # The whole bundle was verified just now against `expected`: the supervisor need not hash it again.
    console_main(early_signals=_DD_SLURM_EARLY_SIGNALS, verified_bundle=(here, expected))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
