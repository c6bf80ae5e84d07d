"""Plan -> batch script (pure). Directives come only from validated fields; nothing is evaluated.

Directive values are double-quoted with sbatch's own escaping (`\\"`, `\\\\`), which sbatch parses
without a shell; the body is one `exec` whose words are single-quoted with `shlex.quote`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Optional

import attrs

from dd_slurm.errors import InvalidInput, RenderError
from dd_slurm.plan.fields import control_char
from dd_slurm.plan.records import Plan
from dd_slurm.store import attempt_files as files

ENTRY_NAME = "entry.py"


@attrs.frozen
class ScriptContext:
    """Everything the script needs beyond the plan; all absolute paths chosen by dd-slurm."""

    attempt_id: str
    attempt_dir: str
    bundle_dir: str
    bundle_digest: str
    plan_digest: str
    bin_dir: Optional[str] = None
    array: Optional[str] = None  # `--array` (`0-5%2`) for a run of shards; attempt_dir is then the run dir
    log_pattern: Optional[str] = None  # `--output`/`--error` when not the attempt's own logs dir
    entry_sha256: str = ""  # of BUNDLE/entry.py, checked by the boot before it runs a byte of it

    @property
    def job_name(self) -> str:
        return f"dd-{self.attempt_id}"


def sbatch_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def directives(plan: Plan, ctx: ScriptContext) -> list[tuple[str, Optional[str]]]:
    """(option, value) pairs in render order; value None is a flag."""
    job = plan.job
    pairs: list[tuple[str, Optional[str]]] = [("--job-name", ctx.job_name)]
    for option in ("partition", "account", "qos", "reservation", "constraint", "comment"):
        value = getattr(job, option)
        if value is not None:
            pairs.append((f"--{option}", value))
    pairs += [("--time", job.time_limit), ("--nodes", str(job.nodes)), ("--ntasks-per-node", "1"),
              ("--cpus-per-task", str(job.cpus_per_task))]
    if job.gpus_per_node:
        pairs.append(("--gres", f"gpu:{job.gpus_per_node}"))
    if job.mem is not None:
        pairs.append(("--mem", job.mem))
    if job.exclusive:
        pairs.append(("--exclusive", None))
    if job.pre_timeout_signal_s > 0:
        pairs.append(("--signal", f"B:USR1@{job.pre_timeout_signal_s}"))
    if ctx.array is not None:
        pairs.append(("--array", ctx.array))
    log = ctx.log_pattern or f"{ctx.attempt_dir.replace('%', '%%')}/{files.LOGS_DIR}/{files.BATCH_LOG}"  # %% is Slurm's literal %
    pairs += [("--output", log), ("--error", log), ("--export", export_list(ctx, forwarded_names(plan))),
              ("--no-requeue", None)]
    return pairs


def forwarded_names(plan: Plan) -> list[str]:
    """Variables the plan forwards from the submitting environment into steps."""
    names = set(plan.client.env.forward)
    for dep in plan.deployments:
        names.update(dep.env.forward)
    return sorted(names)


def forwarded_values(plan: Plan, environ: Mapping[str, str]) -> dict[str, str]:
    """The forwarded variables' values from the submitting environment; InvalidInput naming every
    one that is not set, each with the fields that forward it."""
    where: dict[str, list[str]] = {}
    for name in plan.client.env.forward:
        where.setdefault(name, []).append("client.env.forward")
    for index, dep in enumerate(plan.deployments):
        for name in dep.env.forward:
            where.setdefault(name, []).append(f"deployments[{index}].env.forward")
    missing = [f"{name} ({', '.join(where[name])})" for name in sorted(where) if name not in environ]
    if missing:
        raise InvalidInput(f"not set in this environment, so they cannot be forwarded: {'; '.join(missing)}")
    return {name: environ[name] for name in sorted(where)}


def export_list(ctx: ScriptContext, forward: list[str]) -> str:
    """The batch script's environment: only these (plus Slurm's own SLURM_*). Forwarded names
    carry no value here: sbatch takes it from the environment dd-slurm submits with."""
    names = [f"DD_SLURM_ATTEMPT_ID={ctx.attempt_id}", "DD_SLURM_ROLE=supervisor", "LC_ALL=C.UTF-8"]
    if ctx.bin_dir:
        names.append(f"DD_SLURM_BIN_DIR={ctx.bin_dir}")
    return ",".join(names + forward)


# The boot: the interpreter's first instructions record the signals the runtime acts on (the
# SignalGate adopts them) and unblock them (the batch script starts with them blocked, so one that
# came before the handlers was held pending, not fatal), then it reads entry.py once, checks its
# sha256 against the one rendered here, and runs exactly those bytes, handing on the expected
# bundle digest. Standard library only.
BOOT = ('import _signal as S;E=[];T=(S.SIGTERM,S.SIGINT,S.SIGUSR1,S.SIGHUP);'
        '[S.signal(n,lambda s,f:E.append(s)) for n in T];S.pthread_sigmask(S.SIG_UNBLOCK,T);import hashlib,sys;'
        'h,d,p=sys.argv[1:4];b=open(p,"rb").read();'
        'hashlib.sha256(b).hexdigest()==h or sys.exit("error: "+p+": sha256 is not "+h+'
        '"; the entry point changed after staging, nothing of the bundle ran");'
        'sys.argv=sys.argv[3:];exec(compile(b,p,"exec"),'
        '{"__name__":"__main__","__file__":p,"_DD_SLURM_EARLY_SIGNALS":E,"_DD_SLURM_BUNDLE_DIGEST":d})')


# slurmstepd execs the script: env (GNU coreutils >= 8.31) blocks the stop signals before bash
# starts, and the mask is kept across bash's exec of the boot, which unblocks them once its handlers
# exist. A SIGTERM in the script's first milliseconds is then held, not the death of a supervisor
# that has written nothing yet.
SHEBANG = "#!/usr/bin/env -S --block-signal=TERM,INT,USR1,HUP /bin/bash"


def interpreter(python: str, entry_sha256: str, bundle_digest: str) -> list[str]:
    """How the bundle is run, by the batch script and by every step: isolated (-I -S), writing
    no bytecode (-B: the bundle's own checked-hash .pyc files are used), through the boot; the
    entry.py path and its arguments follow."""
    return [python, "-I", "-S", "-B", "-c", BOOT, entry_sha256, bundle_digest]


def exec_argv(plan: Plan, ctx: ScriptContext) -> list[str]:
    return [*interpreter(plan.runtime.python, ctx.entry_sha256, ctx.bundle_digest), f"{ctx.bundle_dir}/{ENTRY_NAME}",
            "run", ctx.attempt_dir, "--bundle-digest", ctx.bundle_digest, "--plan-digest", ctx.plan_digest]


def render_script(plan: Plan, ctx: ScriptContext) -> str:
    check_context(ctx)
    lines = [SHEBANG, f"# dd-slurm attempt {ctx.attempt_id}: generated, do not edit."]
    for option, value in directives(plan, ctx):
        lines.append(f"#SBATCH {option}" if value is None else f"#SBATCH {option}={sbatch_quote(value)}")
    lines.append("exec " + " ".join(shlex.quote(word) for word in exec_argv(plan, ctx)))
    return "\n".join(lines) + "\n"


def check_context(ctx: ScriptContext) -> None:
    for name in ("attempt_id", "attempt_dir", "bundle_dir", "bundle_digest", "plan_digest", "bin_dir", "array",
                 "log_pattern"):
        value = getattr(ctx, name)
        if value is None:
            continue
        bad = control_char(value)
        if bad or ("," in value and name == "bin_dir"):
            raise RenderError(f"{name}: cannot be rendered safely ({bad or 'comma'})")
    if len(ctx.entry_sha256) != 64 or not set(ctx.entry_sha256) <= set("0123456789abcdef"):
        raise RenderError("entry_sha256: must be the 64-digit sha256 of the bundle's entry.py")
    for name in ("attempt_dir", "bundle_dir"):
        if not getattr(ctx, name).startswith("/"):
            raise RenderError(f"{name}: must be an absolute path")
