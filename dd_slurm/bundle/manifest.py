"""Bundle contents: which files, their sha256, bytecode, and the digest that identifies the bundle.

Sources name the bundle's directory (`sources_digest`, cheap to compute before anything is
compiled); the `digest` covers every file, the bytecode included, and is what the rendered script
hands to the entry point. Bytecode is compiled with checked-hash invalidation, so Python also
checks each .pyc against the (verified) source it was compiled from."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

import dd_slurm
from dd_slurm.bundle.entry import FORMAT, MANIFEST_NAME, manifest_digest, verify

ENTRY_NAME = "entry.py"
ENTRY_SOURCE = Path(__file__).with_name("entry.py")
LIB = "lib"
RUNTIME_DISTRIBUTIONS = ("attrs", "cattrs", "click", "transitions", "six", "typing_extensions", "exceptiongroup")
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
    from importlib import metadata  # lazy, like the other staging-only imports: the runtime imports this module

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


def entry_sha256() -> str:
    """sha256 of the entry point this installation stages (the rendered boot checks it)."""
    return sha256_file(ENTRY_SOURCE)


def sources_digest(file_hashes: dict[str, str]) -> str:
    body = {"version": dd_slurm.__version__, "files": dict(sorted(file_hashes.items()))}
    return sha256_bytes(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def build_manifest(file_hashes: dict[str, str], sources: str) -> dict:
    body = {"format": FORMAT, "version": dd_slurm.__version__, "files": dict(sorted(file_hashes.items()))}
    body["sources_digest"] = sources
    body["digest"] = manifest_digest(body)
    return body


def planned_sources() -> tuple[str, dict[str, bytes | Path]]:
    """The sources this installation would stage (no bytecode yet) and their digest."""
    sources: dict[str, bytes | Path] = dict(source_files())
    sources[ENTRY_NAME] = ENTRY_SOURCE
    hashes = {rel: sha256_bytes(src) if isinstance(src, bytes) else sha256_file(src) for rel, src in sources.items()}
    return sources_digest(hashes), sources


def compile_bytecode(root: Path) -> None:
    """Checked-hash .pyc beside every module under root/lib (Python validates each against its
    source's hash when importing; the manifest lists them, so entry.py verifies them too)."""
    import py_compile
    from importlib.util import cache_from_source

    for source in sorted((root / LIB).rglob("*.py")):
        rel = source.relative_to(root).as_posix()
        py_compile.compile(str(source), cfile=cache_from_source(str(source)), dfile=rel, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)


def manifest_of(root: Path, sources: str) -> dict:
    """The manifest of the files now under root (sources and bytecode)."""
    hashes = {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*"))
              if p.is_file() and p.name != MANIFEST_NAME}
    return build_manifest(hashes, sources)


def planned_manifest() -> dict:
    """The manifest the bundle staged now would have (compiled in a scratch dir; nothing kept)."""
    import tempfile

    digest, sources = planned_sources()
    with tempfile.TemporaryDirectory() as scratch:
        write_files(Path(scratch), sources)
        compile_bytecode(Path(scratch))
        return manifest_of(Path(scratch), digest)


def write_files(root: Path, sources: dict[str, bytes | Path]) -> None:
    for rel, source in sources.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source if isinstance(source, bytes) else source.read_bytes())


def verify_bundle(bundle_dir: Path, expected_digest: str | None = None) -> list[str]:
    """Problems found (empty when the bundle is intact): every file, bytecode included, against
    the manifest, and the manifest's digest against its own contents and the expected digest."""
    return verify(str(bundle_dir), expected_digest or "")


def read_manifest(bundle_dir: Path) -> dict:
    return json.loads((Path(bundle_dir) / MANIFEST_NAME).read_text())

