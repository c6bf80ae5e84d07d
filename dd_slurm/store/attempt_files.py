"""The names of the files in an attempt dir (and in a run of shards' dir), in one place.

ATTEMPT_DIR/
  plan.json                the resolved plan (read-only), digest-checked before use
  job.sbatch               the rendered batch script
  attempt.json             the control plane's record (`.attempt.lock` serializes its writers)
  bundle                   -> ../../bundles/<digest>, for plans that run bundle files
  journal.jsonl            the state machine's transitions
  supervisor.json          who supervises the attempt; supervisor.lock (+ .takeover) its lock
  readiness.json endpoints.json processes.json cleanup.json result-manifest.json
  gateway.json gateway-state.json gateway-stats.json gateway-routes.json timeline.md
  results/                 the client's output
  logs/                    batch-<job id>.out (the batch script's output) and <step>.log
  steps/                   <step>.json (spec), <step>.started.json (what the launcher recorded),
                           tree-<node>.json, identity-<replica>.json, probe-request.json
RUN_DIR/ (runs/<run id>): plan.json, job.sbatch, run.json (`.run.lock` serializes its writers)

Standard library only: the on-node commands import it (see bundle/entry.NODE_MODULES).
bundle/entry.py runs before the bundle is verified and keeps its own copies of the few names it
needs; a unit test compares them with these.
"""

from __future__ import annotations

from pathlib import Path

PLAN = "plan.json"
SCRIPT = "job.sbatch"
RECORD = "attempt.json"
RECORD_LOCK = ".attempt.lock"
BUNDLE_LINK = "bundle"
JOURNAL = "journal.jsonl"
SUPERVISOR = "supervisor.json"
SUPERVISOR_LOCK = "supervisor.lock"
SUPERVISOR_TAKEOVER = "supervisor.lock.takeover"
READINESS = "readiness.json"
ENDPOINTS = "endpoints.json"
PROCESSES = "processes.json"
CLEANUP = "cleanup.json"
RESULT_MANIFEST = "result-manifest.json"
IMAGES = "images.json"  # the container images used and their digests (provenance)
IMAGE_DIGESTS = "cache/image-digests.json"  # in the workspace: each image file hashed once
GATEWAY_CONFIG = "gateway.json"
GATEWAY_STATE = "gateway-state.json"
GATEWAY_STATS = "gateway-stats.json"
GATEWAY_ROUTES = "gateway-routes.json"  # the supervisor's word on each replica: serving, lost, restarting
TIMELINE = "timeline.md"
RESULTS_DIR = "results"
LOGS_DIR = "logs"
STEPS_DIR = "steps"
BATCH_LOG = "batch-%j.out"  # sbatch's --output pattern, in LOGS_DIR; a shard's is ARRAY_BATCH_LOG
ARRAY_BATCH_LOG = "batch-%A_%a.out"
SUPERVISOR_LOG = "supervisor.log"
STARTED_SUFFIX = ".started.json"
RUN_RECORD = "run.json"
RUN_LOCK = ".run.lock"


def log_ref(name: str) -> str:
    """A step's log relative to the attempt dir (`logs/client.log`), as failure details name it."""
    return f"{LOGS_DIR}/{name}.log"


def deploy_step(replica: str, rank: int = 0) -> str:
    """A replica's step on the node of rank `rank`: `deploy-<replica>` for its leader (rank 0),
    `deploy-<replica>-<rank>` for each follower (`<replica>` is `<deployment>-<k>`); its log is
    logs/<step>.log."""
    return f"deploy-{replica}" + (f"-{rank}" if rank else "")


def step_log(attempt_dir: str | Path, name: str) -> Path:
    return Path(attempt_dir, log_ref(name))


def step_spec(attempt_dir: str | Path, name: str) -> Path:
    return Path(attempt_dir, STEPS_DIR, f"{name}.json")


def step_started(attempt_dir: str | Path, name: str) -> Path:
    """What the on-node launcher recorded for step `name` (next to its spec)."""
    return Path(attempt_dir, STEPS_DIR, f"{name}{STARTED_SUFFIX}")


def started_of(spec_path: str | Path) -> Path:
    """The launcher's record for the spec at `spec_path`."""
    return Path(spec_path).with_suffix(STARTED_SUFFIX)


def tree_record(attempt_dir: str | Path, node: str) -> Path:
    """A node's step process trees and sessions, recorded before cleanup stops anything."""
    return Path(attempt_dir, STEPS_DIR, f"tree-{node}.json")


def identity_record(attempt_dir: str | Path, unit: str) -> Path:
    return Path(attempt_dir, STEPS_DIR, f"identity-{unit}.json")


def probe_request(attempt_dir: str | Path) -> Path:
    return Path(attempt_dir, STEPS_DIR, "probe-request.json")


def stage_request(attempt_dir: str | Path) -> Path:
    return Path(attempt_dir, STEPS_DIR, "stage-request.json")


def is_run_dir(path: str | Path) -> bool:
    return (Path(path) / RUN_RECORD).is_file()
