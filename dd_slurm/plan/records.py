"""The resolved plan v1: frozen attrs records, each field validated where it is declared."""

from __future__ import annotations

from typing import Optional

import attrs

from dd_slurm.plan import checks, fields

STOP_SIGNALS = ("TERM", "INT", "USR1")

_v, _opt = checks.v, checks.opt
_positive = checks.between(0, checks.MAX_SECONDS, strict_low=True)


@attrs.frozen
class Env:
    set: dict[str, str] = attrs.field(factory=dict, validator=_v(checks.env_set))
    forward: tuple[str, ...] = attrs.field(default=(), validator=_v(fields.each(checks.passed_name)))
    api_key_var: Optional[str] = attrs.field(default=None, validator=_v(_opt(checks.passed_name)))

    def __attrs_post_init__(self) -> None:
        if self.api_key_var is not None and (self.api_key_var in self.set or self.api_key_var in self.forward):
            raise fields.FieldError(f"{self.api_key_var!r} is also in set or forward: the runtime sets it", ".api_key_var")


@attrs.frozen
class Array:
    count: int = attrs.field(validator=_v(checks.between(1, checks.MAX_ARRAY)))
    max_concurrent: Optional[int] = attrs.field(default=None, validator=_v(_opt(checks.between(1, checks.MAX_ARRAY))))


@attrs.frozen
class Job:
    time_limit: str = attrs.field(validator=_v(checks.time_limit))
    nodes: int = attrs.field(default=1, validator=_v(checks.between(1, checks.MAX_NODES)))
    gpus_per_node: int = attrs.field(default=0, validator=_v(checks.between(0, checks.MAX_GPUS_PER_NODE)))
    cpus_per_task: int = attrs.field(default=1, validator=_v(checks.between(1, checks.MAX_CPUS_PER_TASK)))
    mem: Optional[str] = attrs.field(default=None, validator=_v(_opt(checks.mem)))
    exclusive: bool = False
    pre_timeout_signal_s: int = attrs.field(default=0, validator=_v(checks.between(0, checks.MAX_SIGNAL_S)))
    partition: Optional[str] = attrs.field(default=None, validator=_v(checks.sched))
    account: Optional[str] = attrs.field(default=None, validator=_v(checks.sched))
    qos: Optional[str] = attrs.field(default=None, validator=_v(checks.sched))
    reservation: Optional[str] = attrs.field(default=None, validator=_v(checks.sched))
    constraint: Optional[str] = attrs.field(default=None, validator=_v(checks.sched))
    comment: Optional[str] = attrs.field(default=None, validator=_v(checks.sched))
    array: Optional[Array] = None

    def __attrs_post_init__(self) -> None:
        if self.pre_timeout_signal_s >= fields.time_limit_seconds(self.time_limit):
            raise fields.FieldError("must be shorter than time_limit", ".pre_timeout_signal_s")

    @property
    def shards(self) -> int:
        return self.array.count if self.array else 1


@attrs.frozen
class Restart:
    max: int = attrs.field(default=0, validator=_v(checks.between(0, 1000)))
    backoff_s: float = attrs.field(default=5.0, validator=_v(checks.between(0, checks.MAX_SECONDS)))


@attrs.frozen
class Container:
    """Run a step's program inside this image (pyxis: srun --container-image)."""

    image: str = attrs.field(validator=_v(checks.image))
    image_sha256: Optional[str] = attrs.field(default=None, validator=_v(_opt(checks.sha256_hex)))
    mounts: tuple[str, ...] = attrs.field(default=(), validator=_v(fields.each(checks.container_mount)))
    workdir: Optional[str] = attrs.field(default=None, validator=_v(_opt(checks.absolute_path)))

    def __attrs_post_init__(self) -> None:
        if self.image_sha256 is not None and not self.image.startswith("/"):
            raise fields.FieldError("only for an image file: a registry reference is pulled by pyxis, not checked "
                                    "here", ".image_sha256")


@attrs.frozen
class Weights:
    """The model's weights; `node_local`: copied once per node to `local_dir` before the servers start."""

    path: str = attrs.field(validator=_v(checks.absolute_path))
    stage: str = attrs.field(default="none", validator=_v(checks.one_of(fields.WEIGHT_STAGES)))
    local_dir: Optional[str] = attrs.field(default=None, validator=_v(_opt(checks.local_dir)))

    def __attrs_post_init__(self) -> None:
        if self.local_dir is not None and self.stage != "node_local":
            raise fields.FieldError('only with stage "node_local"', ".local_dir")


@attrs.frozen
class Deployment:
    name: str = attrs.field(validator=_v(checks.identifier))
    model_alias: str = attrs.field(validator=_v(checks.identifier))
    argv: tuple[str, ...] = attrs.field(validator=_v(checks.argv(fields.DEPLOYMENT_PLACEHOLDERS)))
    port: Optional[int] = attrs.field(default=None, validator=_v(_opt(checks.port)))
    nodes: int = attrs.field(default=1, validator=_v(checks.between(1, checks.MAX_NODES)))
    gpus_per_node: int = attrs.field(default=0, validator=_v(checks.between(0, checks.MAX_GPUS_PER_NODE)))
    replicas: int = attrs.field(default=1, validator=_v(checks.between(1, checks.MAX_REPLICAS)))
    max_inflight: int = attrs.field(default=256, validator=_v(checks.between(1, checks.MAX_INFLIGHT)))
    served_model: Optional[str] = attrs.field(default=None, validator=_v(_opt(checks.text)))
    follower_argv: Optional[tuple[str, ...]] = attrs.field(
        default=None, validator=_v(_opt(checks.argv(fields.DEPLOYMENT_PLACEHOLDERS)))
    )
    health_path: str = attrs.field(default="/health", validator=_v(checks.health_path))
    ready_timeout_s: float = attrs.field(default=600.0, validator=_v(_positive))
    env: Env = attrs.field(factory=Env)
    # The attempt goes on while this many replicas are not lost (null: all of them, the default).
    min_replicas: Optional[int] = attrs.field(default=None, validator=_v(_opt(checks.between(1, checks.MAX_REPLICAS))))
    restart: Optional[Restart] = None
    container: Optional[Container] = None
    weights: Optional[Weights] = None

    def __attrs_post_init__(self) -> None:
        if self.min_replicas is not None and self.min_replicas > self.replicas:
            raise fields.FieldError(f"{self.min_replicas} is more than replicas ({self.replicas})", ".min_replicas")
        if self.nodes > 1 and self.follower_argv is None:
            raise fields.FieldError("required when nodes > 1", ".follower_argv")
        if self.nodes == 1 and self.follower_argv is not None:
            raise fields.FieldError("only allowed when nodes > 1", ".follower_argv")
        for where, argv in ((".argv", self.argv), (".follower_argv", self.follower_argv or ())):
            used = [i for i, arg in enumerate(argv) if "weights" in fields.placeholders(arg)]
            if used and self.weights is None:
                raise fields.FieldError("{weights} needs the deployment's weights", f"{where}[{used[0]}]")
        if self.port is not None and self.port + self.replicas - 1 > 65535:
            raise fields.FieldError(f"replica {self.replicas - 1} would use port {self.port + self.replicas - 1}, "
                               "above 65535", ".port")


@attrs.frozen
class Result:
    path: str = attrs.field(validator=_v(checks.result_path))
    format: str = attrs.field(validator=_v(checks.one_of(fields.RESULT_FORMATS)))
    min_records: int = attrs.field(default=0, validator=_v(checks.between(0, 2**63 - 1)))
    keep_partial: bool = True


@attrs.frozen
class Client:
    argv: tuple[str, ...] = attrs.field(validator=_v(checks.argv(fields.CLIENT_PLACEHOLDERS)))
    result: Result
    preflight_argv: Optional[tuple[str, ...]] = attrs.field(
        default=None, validator=_v(_opt(checks.argv(fields.CLIENT_PLACEHOLDERS)))
    )
    env: Env = attrs.field(factory=Env)
    timeout_s: Optional[float] = attrs.field(default=None, validator=_v(_opt(_positive)))
    stop_signal: str = attrs.field(default="TERM", validator=_v(checks.one_of(STOP_SIGNALS)))
    stop_grace_s: float = attrs.field(default=30.0, validator=_v(checks.between(0, checks.MAX_SECONDS)))
    container: Optional[Container] = None


@attrs.frozen
class Gateway:
    queue_limit: int = attrs.field(default=1024, validator=_v(checks.between(0, checks.MAX_QUEUE)))
    queue_timeout_s: float = attrs.field(default=30.0, validator=_v(_positive))
    stall_timeout_s: Optional[float] = attrs.field(default=300.0, validator=_v(_opt(_positive)))
    header_timeout_s: float = attrs.field(default=10.0, validator=_v(_positive))
    idle_timeout_s: float = attrs.field(default=120.0, validator=_v(_positive))
    max_connections: int = attrs.field(default=4096, validator=_v(checks.between(1, checks.MAX_QUEUE)))
    drain_s: float = attrs.field(default=30.0, validator=_v(checks.between(0, checks.MAX_SECONDS)))
    eject_after: int = attrs.field(default=3, validator=_v(checks.between(1, checks.MAX_QUEUE)))


@attrs.frozen
class Runtime:
    python: str = attrs.field(validator=_v(checks.absolute_path))
    cleanup_grace_s: float = attrs.field(default=10.0, validator=_v(checks.between(0, checks.MAX_SECONDS)))
    reconcile_deadline_s: float = attrs.field(default=300.0, validator=_v(_positive))


@attrs.frozen
class Plan:
    schema_version: int = attrs.field(validator=_v(checks.supported_version))
    name: str = attrs.field(validator=_v(checks.identifier))
    job: Job
    deployments: tuple[Deployment, ...] = attrs.field(validator=_v(checks.non_empty))
    client: Client
    runtime: Runtime
    gateway: Gateway = attrs.field(factory=Gateway)

    def __attrs_post_init__(self) -> None:
        seen: dict[str, int] = {}
        for index, dep in enumerate(self.deployments):
            where = f".deployments[{index}]"
            if dep.name in seen:
                raise fields.FieldError(f"duplicate deployment name {dep.name!r}", f"{where}.name")
            seen[dep.name] = index
            if dep.nodes > self.job.nodes:
                raise fields.FieldError(f"needs {dep.nodes} nodes but job.nodes is {self.job.nodes}", f"{where}.nodes")
            if dep.gpus_per_node > self.job.gpus_per_node:
                raise fields.FieldError(
                    f"needs {dep.gpus_per_node} GPUs per node but job.gpus_per_node is {self.job.gpus_per_node}",
                    f"{where}.gpus_per_node",
                )
        if self.client.env.api_key_var is None and any(d.env.api_key_var for d in self.deployments):
            raise fields.FieldError("required when a deployment sets env.api_key_var: the client must present the "
                               "attempt key to the gateway", ".client.env.api_key_var")
        from dd_slurm.plan.fit import check_fit

        check_fit(self)
