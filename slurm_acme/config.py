"""``acme.toml``: one validated configuration for every command.

Where it comes from, first found wins: ``--config PATH``, ``$ACME_CONF``,
``acme.toml`` beside ``$SLURM_CONF``, ``/etc/acme/acme.toml``, then built-in
defaults. The telemetry hooks (a shell script, ``data/node/acme-hook``) follow
the same order: slurmd gives them no environment but ``SLURM_CONF``, so a site
or a test cluster that keeps its config beside slurm.conf needs that step; a
unit test runs the hook against this function. Each section is a frozen
dataclass (:mod:`slurm_acme.sections`: no pydantic, so reading the config
costs a command little) that rejects unknown keys, so a typo is an error that
names the file, the field and the value instead of a setting silently ignored.

Settings that *grant* something (:data:`TRUSTED_ONLY`: who is an admin, running
generated code without a sandbox, the drain policy) are read only from the system file, and only
while root owns it and its folders and nobody else can write them
(:func:`system_config`). A user's ``--config`` or ``$ACME_CONF`` may set every
other option; a granting setting there is ignored with a warning.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import tomllib

from slurm_acme.errors import ConfigError
from slurm_acme.report.model import WorkloadType
from slurm_acme.sections import Section, SectionError, setting

log = logging.getLogger(__name__)

SYSTEM_CONFIG = Path("/etc/acme/acme.toml")
#: (section, key) honoured only from the trusted system config.
TRUSTED_ONLY: tuple[tuple[str, str], ...] = (
    ("report", "admin_group"), ("evaluate", "allow_unsandboxed_code"),
    *(("nodes", key) for key in ("drain", "decisive_xids", "decisive_codes", "events_to_drain",
                                 "window_hours", "max_drained_share")),
)


def default_store_url() -> str:
    """SQLite under the user's data dir: works on a laptop and a login node."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return f"sqlite:///{base / 'slurm-acme' / 'acme.db'}"


@dataclass(frozen=True)
class StoreConfig(Section):
    url: str = setting(default_factory=default_store_url, description="SQLAlchemy URL")


@dataclass(frozen=True)
class NameRule(Section):
    pattern: str
    type: WorkloadType


def _default_name_rules() -> list[NameRule]:
    return [
        NameRule(pattern=r"(?i)eval|bench|opencompass|lm[-_]eval", type="Eval"),
        NameRule(pattern=r"(?i)pretrain|\bpt[-_]", type="Pretrain"),
        NameRule(pattern=r"(?i)sft|finetun|instruct", type="SFT"),
        NameRule(pattern=r"(?i)mllm|vlm|llava|vision", type="MLLM"),
        NameRule(pattern=r"(?i)debug|test|interactive|^bash$|^sh$", type="Debug"),
    ]


@dataclass(frozen=True)
class ClusterConfig(Section):
    name: str = setting("acme", description="cluster name recorded with every row")
    #: Regex rules on the job name used when a job has no ``acme:type=X`` comment.
    name_rules: list[NameRule] = setting(default_factory=_default_name_rules)


@dataclass(frozen=True)
class SlurmConfig(Section):
    command_timeout_s: float = setting(60.0, gt=0)


#: The node collector's samplers, in the order it tries them.
SamplerName = Literal["nvml", "dcgm", "ipmi", "host", "infiniband"]
SAMPLER_NAMES: tuple[SamplerName, ...] = get_args(SamplerName)


@dataclass(frozen=True)
class TelemetryConfig(Section):
    interval_s: float = setting(15.0, gt=0)
    spool_dir: str = "/var/spool/acme"
    #: Fake GPUs for the emulated local cluster only; never on by default.
    synthetic_gpus: int = setting(0, ge=0)
    flush_batch: int = setting(5000, ge=1)
    #: Samplers to try; each one that finds no hardware says so once and is skipped.
    samplers: list[SamplerName] = setting(default_factory=lambda: list(SAMPLER_NAMES))
    #: A sensor command (ipmitool, dcgmi) slower than this is killed and flagged.
    sensor_timeout_s: float = setting(5.0, gt=0)
    #: How often the spool is pushed to the central store (also at every job end).
    flush_interval_s: float = setting(60.0, gt=0)
    #: Flushed samples stay in the node-local spool this long (for `collectd flush --db`).
    spool_keep_hours: float = setting(24.0, ge=0)
    #: A job summary whose samples cover less of its walltime than this is flagged.
    min_coverage: float = setting(0.8, ge=0, le=1)
    #: Days of raw GPU and node samples the central store keeps; hourly rollups
    #: and per-job summaries are kept indefinitely.
    raw_retention_days: float = setting(14.0, gt=0)
    #: At most this many raw rows are deleted per retention transaction (SQLite),
    #: so pruning never holds the store's write lock for long.
    prune_batch: int = setting(20000, ge=1)
    #: Where per-job summaries and rollups come from: this project's node
    #: collectors, or PromQL range queries over an existing Prometheus that
    #: scrapes dcgm-exporter (``sacme collectd import``).
    source: Literal["collector", "prometheus"] = "collector"
    #: Base URL of that Prometheus (``http://host:9090``), for ``source = "prometheus"``.
    prometheus_url: str = ""
    #: Port the node collector serves ``/metrics`` on (Prometheus exposition,
    #: dcgm-exporter's metric names); 0 = off.
    metrics_port: int = setting(0, ge=0, le=65535)
    #: Address ``/metrics`` listens on.
    metrics_address: str = "0.0.0.0"


@dataclass(frozen=True)
class ReportConfig(Section):
    tdp_watts: float = setting(400.0, gt=0)
    #: Unix group whose members may see every user's jobs, runs and evaluations.
    #: Only honoured from the system config (root-owned, not writable by others).
    admin_group: str = "root"


@dataclass(frozen=True)
class LLMConfig(Section):
    enabled: bool = False
    endpoint: str = ""
    model: str = ""
    api_key_env: str = "ACME_LLM_API_KEY"
    timeout_s: float = setting(60.0, gt=0)


@dataclass(frozen=True)
class DiagnosisConfig(Section):
    rules: list[str] = setting(default_factory=list, description="site rule files layered on top")
    #: ``auto``: sentence embeddings (mixed with TF-IDF) when the ``[embed]``
    #: extra is installed, else TF-IDF alone.
    retrieval: Literal["auto", "embedding", "tfidf"] = "auto"
    #: Similarity below which retrieval answers "unknown"; unset: the value
    #: calibrated leave-one-out for the retrieval in use (9 in 10 answers right).
    retrieval_threshold: float | None = setting(None, ge=0, le=1)
    llm: LLMConfig = setting(default_factory=LLMConfig)


@dataclass(frozen=True)
class HarnessToolConfig(Section):
    """Pass-through settings for one external harness (``[evaluate.lm_eval]``, ``[evaluate.opencompass]``).

    Every field can be overridden on the ``seval`` command line; see
    :mod:`slurm_acme.evaluate.backends.external` for the flag each becomes.
    """

    #: Absolute path of the tool's executable; empty = the one beside the worker's Python.
    executable: str = ""
    #: lm-eval ``--include_path`` folders / OpenCompass ``--config-dir`` (user tasks).
    task_paths: list[str] = setting(default_factory=list)
    #: lm-eval ``--model_args`` added after ``pretrained=``; OpenCompass ``--model-kwargs``.
    model_args: list[str] = setting(default_factory=list)
    num_fewshot: int | None = setting(None, ge=0)
    #: Examples per task (lm-eval ``--limit``: a count, or a fraction below 1).
    limit: float | None = setting(None, gt=0)
    batch_size: str = "1"
    #: OpenCompass ``--max-out-len`` (lm-eval takes it from each task).
    max_out_len: int = setting(256, ge=1)


@dataclass(frozen=True)
class EvaluateConfig(Section):
    local_dir: str = "/dev/shm/acme-eval"
    partition: str = ""
    cpu_partition: str = ""
    #: Shared directory (visible on every node) for run specs, predictions and scores.
    work_dir: str = setting(default_factory=lambda: str(Path.home() / ".local" / "share" / "slurm-acme" / "seval"))
    #: Extra registry CSVs (user datasets), layered over the shipped ones.
    datasets_files: list[str] = setting(default_factory=list)
    backend: Literal["builtin", "opencompass", "lm-eval"] = "builtin"
    gpus_per_node: int = setting(8, ge=1)
    cpu_slots_per_node: int = setting(32, ge=1)
    cpus_per_score_task: int = setting(2, ge=1)
    #: Seconds a trial pays before inference: engine start + loading from node-local memory.
    trial_overhead_s: float = setting(12.0, ge=0)
    #: Storage bandwidth per node (Gb/s) for the planner's preload and baseline estimates.
    storage_gbps: float = setting(25.0, gt=0)
    time_limit: str = "01:00:00"
    #: ``auto`` reads JobContainerType; ``allocation`` = one allocation per node with srun steps.
    mode: Literal["auto", "jobs", "allocation"] = "auto"
    #: Run generated code (code-scoring datasets) without OS isolation where bubblewrap
    #: or user namespaces are unavailable. Only honoured from the system config.
    allow_unsandboxed_code: bool = False
    #: External harnesses: datasets scored by running model-written code (HumanEval,
    #: MBPP) run it inside the tool, outside seval's sandbox; they are refused unless
    #: the site sets ``allow_unsandboxed_code`` above.
    lm_eval: HarnessToolConfig = setting(default_factory=HarnessToolConfig)
    opencompass: HarnessToolConfig = setting(default_factory=HarnessToolConfig)

    def tool(self, backend: str) -> HarnessToolConfig:
        """The pass-through settings of an external backend."""
        return self.lm_eval if backend == "lm-eval" else self.opencompass


HardwareCode = Literal["ecc_dbe", "row_remap_failure", "gpu_lost"]
HARDWARE_CODES: tuple[HardwareCode, ...] = get_args(HardwareCode)


@dataclass(frozen=True)
class NodesConfig(Section):
    """The drain policy (``[nodes]``): when a node with infrastructure events leaves
    the pool. Draining is opt-in, and the whole section is read only from the
    trusted system config: a user's config could otherwise drain the cluster."""

    #: Drain nodes (``sacme nodes reconcile`` as root, and each root-run collector
    #: for its own node). Off: the ledger is kept and reconcile only says what it would do.
    drain: bool = False
    #: XID codes that drain a node after one event (79 fallen off the bus, 48 double-bit
    #: ECC, 94/95 contained/uncontained ECC).
    decisive_xids: list[int] = setting(default_factory=lambda: [48, 79, 94, 95])
    #: Other hardware events that drain after one: an uncorrectable (double-bit) ECC
    #: error, a failed row remap, a GPU fallen off the bus.
    decisive_codes: list[HardwareCode] = setting(default_factory=lambda: list(HARDWARE_CODES))
    #: Infrastructure events (distinct jobs) within the window that drain a node.
    events_to_drain: int = setting(2, ge=1)
    #: The window, in hours. Events before a node's last resume never count.
    window_hours: float = setting(24.0, gt=0)
    #: At most this share of the cluster's nodes is drained by slurm-acme at once
    #: (rounded down: 0.25 of 4 nodes is 1, 0.1 of 4 is none).
    max_drained_share: float = setting(0.1, ge=0, le=1)


@dataclass(frozen=True)
class FilesConfig(Section):
    #: Unix group given read access to the store, run and evaluation folders slurm-acme
    #: creates (0640 files, 2750 folders); empty keeps them private (0600 / 0700).
    group: str = ""


@dataclass(frozen=True)
class AcmeConfig(Section):
    store: StoreConfig = setting(default_factory=StoreConfig)
    cluster: ClusterConfig = setting(default_factory=ClusterConfig)
    slurm: SlurmConfig = setting(default_factory=SlurmConfig)
    telemetry: TelemetryConfig = setting(default_factory=TelemetryConfig)
    report: ReportConfig = setting(default_factory=ReportConfig)
    diagnosis: DiagnosisConfig = setting(default_factory=DiagnosisConfig)
    evaluate: EvaluateConfig = setting(default_factory=EvaluateConfig)
    files: FilesConfig = setting(default_factory=FilesConfig)
    nodes: NodesConfig = setting(default_factory=NodesConfig)
    #: Where this config was read from (None for built-in defaults).
    source: str | None = None


def beside_slurm_conf() -> Path | None:
    """``acme.toml`` in the folder of ``$SLURM_CONF``, when that is set and the file exists."""
    slurm_conf = os.environ.get("SLURM_CONF")
    if not slurm_conf or "/" not in slurm_conf:
        return None
    candidate = Path(slurm_conf).parent / "acme.toml"
    return candidate if os.access(candidate, os.R_OK) else None


def find_config_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to read, following the documented search order."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("ACME_CONF")
    if env:
        return Path(env)
    beside = beside_slurm_conf()
    if beside is not None:
        return beside
    if SYSTEM_CONFIG.exists():
        return SYSTEM_CONFIG
    return None


def parse_config(data: dict[str, Any], source: str) -> AcmeConfig:
    """Validate a decoded TOML document; errors name the file and field."""
    try:
        return AcmeConfig.validate({**data, "source": source})
    except SectionError as exc:
        raise ConfigError(f"{source}: {exc.describe()}") from None


def load_config(explicit: str | os.PathLike[str] | None = None) -> AcmeConfig:
    """Read and validate ``acme.toml`` (or return defaults when none exists)."""
    path = find_config_path(explicit)
    if path is None:
        return AcmeConfig()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from None
    return parse_config(data, str(path))


def untrusted_reason(path: Path) -> str | None:
    """Why ``path`` could have been written by someone other than root, or None.

    The file and every folder above it must be owned by root and not writable by
    group or others (a sticky folder such as /tmp is fine: others cannot replace
    root's entries in it); otherwise a user could have put an admin grant there.
    """
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return "missing"
    for part in (real, *real.parents):
        try:
            st = part.lstat()
        except OSError as exc:
            return f"cannot stat {part}: {exc.strerror}"
        if st.st_uid != 0:
            return f"{part} is not owned by root"
        sticky_dir = part != real and st.st_mode & stat.S_ISVTX  # like /tmp: others cannot replace root's entries
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky_dir:
            return f"{part} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


#: Root only: another system config path (a test cluster's, a staging copy). It must
#: pass the same ownership checks; for anyone else it is ignored.
SYSTEM_CONFIG_ENV = "ACME_SYSTEM_CONF"


def system_config_path() -> Path:
    """Where the trusted system config is: ``/etc/acme/acme.toml``, or for root
    ``$ACME_SYSTEM_CONF`` (root could write /etc/acme anyway; a user's variable
    never moves it)."""
    override = os.environ.get(SYSTEM_CONFIG_ENV)
    if override and os.geteuid() == 0:
        return Path(override)
    return SYSTEM_CONFIG


def system_config() -> AcmeConfig:
    """The trusted system config (or built-in defaults): the only source of the
    :data:`TRUSTED_ONLY` settings."""
    path = system_config_path()
    if not path.exists():
        return AcmeConfig()
    reason = untrusted_reason(path)
    if reason is not None:
        log.warning("%s is not trusted (%s): its admin settings are ignored", path, reason)
        return AcmeConfig()
    return load_config(path)


def ignored_grants(config: AcmeConfig) -> list[str]:
    """Granting settings ``config`` sets that will not be honoured (it is not the system file)."""
    if config.source is None or Path(config.source) == system_config_path():
        return []
    defaults = AcmeConfig()
    return [f"{section}.{key}" for section, key in TRUSTED_ONLY
            if getattr(getattr(config, section), key) != getattr(getattr(defaults, section), key)]
