"""Bundle contents: which files, their sha256, and the digest that names the bundle (pure-ish)."""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Iterable

import dd_slurm

FORMAT = 1
MANIFEST_NAME = "manifest.json"
ENTRY_NAME = "entry.py"
LIB = "lib"
RUNTIME_DISTRIBUTIONS = ("attrs", "cattrs", "click", "transitions", "six", "typing_extensions", "exceptiongroup")
ENTRY_PY = '''"""dd-slurm bundle entry point: the bundle's lib/ first on sys.path, then the CLI."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
if len(sys.argv) > 1 and sys.argv[1].startswith("_"):  # on-node commands: standard library only
    from dd_slurm.runtime.stepexec import main as node_main

    sys.exit(node_main(sys.argv[1:]))
from dd_slurm.cli import main  # noqa: E402

main()
'''
COMPILED = (".so", ".pyd", ".dylib", ".dll")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _package_files(root: Path) -> Iterable[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path


def source_files() -> dict[str, Path]:
    """bundle-relative path -> source file, for dd_slurm and its pure-Python dependencies."""
    files: dict[str, Path] = {}
    own = Path(dd_slurm.__file__).resolve().parent
    for path in _package_files(own):
        files[f"{LIB}/dd_slurm/{path.relative_to(own)}"] = path
    for name in RUNTIME_DISTRIBUTIONS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for entry in dist.files or ():
            rel = str(entry)
            if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc") or ".dist-info/" in rel:
                continue
            if rel.endswith(COMPILED):
                raise RuntimeError(f"{name} ships compiled code ({rel}); the runtime must stay pure Python")
            source = Path(str(dist.locate_file(entry)))
            if source.is_file():
                files[f"{LIB}/{rel}"] = source
    return files


def build_manifest(file_hashes: dict[str, str]) -> dict:
    body = {"format": FORMAT, "version": dd_slurm.__version__, "files": dict(sorted(file_hashes.items()))}
    body["digest"] = manifest_digest(body)
    return body


def manifest_digest(manifest: dict) -> str:
    covered = {"format": manifest["format"], "version": manifest["version"], "files": manifest["files"]}
    return sha256_bytes(json.dumps(covered, sort_keys=True, separators=(",", ":")).encode())


def planned_manifest() -> tuple[dict, dict[str, bytes | Path]]:
    """The manifest of the bundle this installation would stage, and where each file comes from."""
    sources: dict[str, bytes | Path] = dict(source_files())
    sources[ENTRY_NAME] = ENTRY_PY.encode()
    hashes = {rel: sha256_bytes(src) if isinstance(src, bytes) else sha256_file(src) for rel, src in sources.items()}
    return build_manifest(hashes), sources


def verify_bundle(bundle_dir: Path, expected_digest: str | None = None) -> list[str]:
    """Problems found (empty when the bundle is intact): every file against the manifest, and the
    manifest's digest against its own contents and the expected digest."""
    try:
        manifest = json.loads((bundle_dir / MANIFEST_NAME).read_text())
    except (OSError, ValueError) as err:
        return [f"{MANIFEST_NAME}: unreadable ({err})"]
    problems = []
    if manifest_digest(manifest) != manifest.get("digest"):
        problems.append(f"{MANIFEST_NAME}: digest does not match its contents")
    if expected_digest and manifest.get("digest") != expected_digest:
        problems.append(f"{MANIFEST_NAME}: digest {manifest.get('digest')} is not the expected {expected_digest}")
    for rel, digest in manifest["files"].items():
        path = bundle_dir / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
        elif sha256_file(path) != digest:
            problems.append(f"{rel}: checksum mismatch")
    listed = set(manifest["files"]) | {MANIFEST_NAME}
    extra = sorted(str(p.relative_to(bundle_dir)) for p in bundle_dir.rglob("*") if p.is_file()
                   and str(p.relative_to(bundle_dir)) not in listed)
    problems += [f"{rel}: not in the manifest" for rel in extra]
    return problems
