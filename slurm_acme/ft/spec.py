"""``train.yaml``: the validated description of a fault-tolerant pretraining run.

Unknown keys are rejected with the list of valid ones, and every error names
the file, the line and the field, because a typo in a 3-day job's spec must
fail at submit time, not silently at hour 40.

The file is outside input, so it is also held to what an attacker could put in
it: control characters (newline, CR, NUL, ...) are refused in every value that
could reach the batch script or Slurm's argv; YAML anchors and aliases are
refused (an alias bomb expands a small file into gigabytes); files over
:data:`MAX_SPEC_BYTES` are refused before parsing, and nesting deeper than
:data:`MAX_SPEC_DEPTH` (which PyYAML parses in quadratic time) as soon as it is seen.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from slurm_acme.errors import InputError
from slurm_acme.ft.sbatch_options import render_sbatch_options

if TYPE_CHECKING:  # yaml is imported where a train.yaml is read: ``sacme status`` reads a stored spec (JSON)
    import yaml

#: A train.yaml is a few KB; anything near this is not a spec.
MAX_SPEC_BYTES = 1 << 20
#: Mappings and lists nested deeper than this are refused (a spec has about 3 levels).
MAX_SPEC_DEPTH = 32
#: C0 controls (tab allowed) and DEL: a newline in a value rendered into a script is a command.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
#: (model, field) whose text may span lines: the user's own shell command and env values,
#: which never enter the batch script (only NUL, impossible in argv and environ, is refused).
_MULTILINE = {("TrainSpec", "command"), ("TrainSpec", "env")}


def _check_text(value: Any, multiline: bool) -> None:
    if isinstance(value, str):
        bad = re.search("\x00", value) if multiline else _CONTROL.search(value)
        if bad:
            raise ValueError(f"control character {bad.group()!r} is not allowed")
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_text(item, multiline)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, False)
            _check_text(item, multiline)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("*", mode="after")
    @classmethod
    def _no_control_characters(cls, value: Any, info: ValidationInfo) -> Any:
        _check_text(value, (cls.__name__, info.field_name) in _MULTILINE)
        return value


#: torch.save files or folders a trainer typically writes (the step is the last number
#: in the name): ``model_step_100.pt``, Lightning's ``epoch=1-step=500.ckpt``, HF's
#: ``checkpoint-500/``, Megatron's ``iter_0000100/``.
DEFAULT_CHECKPOINT_GLOBS = ("*.pt", "*.pth", "*.ckpt", "checkpoint-*", "checkpoint_*",
                            "iter_*", "global_step*", "step*")


class CheckpointSpec(_Section):
    """``checkpoint:``: where the trainer's checkpoints are, and how ours are written."""

    dir: str = Field(description="where the trainer writes checkpoints (shared by all nodes)")
    interval: int = Field(default=100, ge=1, description="steps between checkpoints")
    keep: int = Field(default=3, ge=1, description="checkpoints kept on disk")
    async_: bool = Field(default=True, alias="async", description="persist in the background")
    #: The trainer's own torch.save checkpoints (files or folders) in ``dir``, by name;
    #: the step is the last number in the name. DCP folders (a ``.metadata`` file) and
    #: slurm-acme's own checkpoints are found whatever their names.
    glob: list[str] = Field(default_factory=lambda: list(DEFAULT_CHECKPOINT_GLOBS),
                            min_length=0)

    @field_validator("glob")
    @classmethod
    def _globs_are_names(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if not pattern.strip() or "/" in pattern or pattern.startswith("."):
                raise ValueError(f"{pattern!r} is not a file-name pattern inside checkpoint.dir "
                                 "(e.g. '*.pt' or 'checkpoint-*')")
        return value


class ProgressSpec(_Section):
    """How the supervisor sees training move from the trainer's own output."""

    #: Extra regular expressions for a step line; the step is the group named ``step``
    #: (or the first group). Tried before the built-in ones.
    patterns: list[str] = Field(default_factory=list)
    #: Also use the built-in patterns (tqdm ``N/M``, Lightning, Megatron ``iteration N/``,
    #: torchtitan ``step: N``, a plain ``step N``).
    defaults: bool = True

    @field_validator("patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
            if compiled.groups < 1:
                raise ValueError(f"{pattern!r} has no group for the step number, e.g. 'it=(\\d+)'")
        return value


class LossSpikeSpec(_Section):
    """``fault_tolerance.loss_spike:``: the guard that rolls back past a spiking loss."""

    enabled: bool = True
    #: A loss above ``ratio`` x its moving average is a spike.
    ratio: float = Field(default=3.0, gt=1)
    warmup: int = Field(default=10, ge=0, description="steps before the guard arms")
    #: Steps skipped from the spike on (the offending batches) after a rollback.
    skip: int = Field(default=1, ge=1)


class FaultToleranceSpec(_Section):
    """``fault_tolerance:``: restart caps, hang limits, health checks, the time-limit signal."""

    max_restarts: int = Field(default=3, ge=0)
    health_check: Literal["allgather", "none"] = "allgather"
    #: Seconds without a new training step before the job counts as hung.
    hang_timeout: float = Field(default=600.0, gt=0)
    #: Seconds allowed before the first step (imports, process group, data loading);
    #: the hang clock only starts once training has reported a step.
    startup_timeout: float = Field(default=900.0, gt=0)
    loss_spike: LossSpikeSpec = Field(default_factory=LossSpikeSpec)
    exclude: list[str] = Field(default_factory=list, description="nodes never to use")
    #: Seconds before the time limit at which Slurm sends USR2 (checkpoint, requeue).
    signal_lead: int = Field(default=120, ge=1)
    #: Seconds the pre-flight/culprit health check may take per pair test.
    health_timeout: float = Field(default=60.0, gt=0)
    #: Restarts after failures nobody recognised (diagnosis ``unknown``); counted apart
    #: from, and capped lower than, ``max_restarts``: a repeated unknown is likely a bug.
    max_unknown_restarts: int = Field(default=1, ge=0)
    #: What the time-limit warning (USR2, ``signal_lead`` s before the limit) does:
    #: ``checkpoint`` forwards USR2 to the trainer (it checkpoints and exits 76);
    #: ``stop`` ends the step (SIGTERM, then SIGKILL) and requeues, to resume from the
    #: newest checkpoint; ``auto`` is ``checkpoint`` when the trainer writes the metrics
    #: file (it speaks the contract) and is launched by srun, else ``stop``.
    time_limit_action: Literal["auto", "checkpoint", "stop"] = "auto"
    #: Recovery that keeps the allocation (issue 19). ``None`` (absent): every failure
    #: ends the job and requeues it. ``K`` >= 0: the job allocates ``nodes + K`` nodes and
    #: trains on ``nodes`` of them; a failed node is replaced by a spare, and a transient
    #: failure (unknown, hang) restarts the step, inside the same allocation and job id.
    spares: int | None = Field(default=None, ge=0, le=1024, strict=True)

    @property
    def in_place(self) -> bool:
        """Whether failures are recovered inside the allocation (``spares`` is set)."""
        return self.spares is not None

    @property
    def spare_count(self) -> int:
        return self.spares or 0


class DiagnosisSpec(_Section):
    """``diagnosis:``: site rule files on top of the shipped rule book; the optional LLM."""

    rules: list[str] = Field(default_factory=list, description="extra rule files")
    llm: bool = False


#: Launchers a command must not start itself: the supervisor already launched it.
LAUNCHERS = ("srun", "sbatch", "salloc", "torchrun", "mpirun", "mpiexec")
_TORCH_RUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


class TrainSpec(_Section):
    """A whole train.yaml (see docs/training.md for every key)."""

    name: str = Field(min_length=1)
    nodes: int = Field(ge=1)
    gpus_per_node: int = Field(default=0, ge=0)
    #: Tasks per node (srun), or worker processes per node (torchrun's --nproc-per-node).
    ntasks_per_node: int = Field(default=1, ge=1)
    cpus_per_task: int | None = Field(default=None, ge=1)
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    #: ``srun``: the command is every task (``ntasks_per_node`` per node). ``torchrun``:
    #: one torchrun agent per node runs ``ntasks_per_node`` workers, rendezvous (c10d)
    #: on the first node of the allocation.
    launch: Literal["srun", "torchrun"] = "srun"
    #: How to start torchrun when ``launch: torchrun`` (default: ``torchrun`` beside the
    #: command's Python, else on PATH).
    torchrun: list[str] | None = Field(default=None, min_length=1)
    command: list[str] | str
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    #: Further sbatch options (mem, constraint, exclusive, gres, reservation, ...),
    #: checked against an allow-list and passed as ``--key=value`` argv words.
    sbatch: dict[str, str | int | bool] = Field(default_factory=dict)
    checkpoint: CheckpointSpec
    progress: ProgressSpec = Field(default_factory=ProgressSpec)
    fault_tolerance: FaultToleranceSpec = Field(default_factory=FaultToleranceSpec)
    diagnosis: DiagnosisSpec = Field(default_factory=DiagnosisSpec)

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, value: list[str] | str, info: ValidationInfo) -> list[str] | str:
        if not value or (isinstance(value, str) and not value.strip()):
            raise ValueError("command must not be empty")
        problem = nested_launcher(value, info.data.get("launch", "srun"))
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("sbatch")
    @classmethod
    def _sbatch_allowed(cls, value: dict[str, str | int | bool]) -> dict[str, str | int | bool]:
        render_sbatch_options(value)  # raises ValueError naming the key and the allowed ones
        return value

    @field_validator("fault_tolerance")
    @classmethod
    def _time_limit_action_fits_launch(cls, value: FaultToleranceSpec,
                                       info: ValidationInfo) -> FaultToleranceSpec:
        if info.data.get("launch") == "torchrun" and value.time_limit_action == "checkpoint":
            # torchrun's agent dies of USR2 (it handles TERM/INT/HUP/QUIT only) and takes
            # its workers with it, uncheckpointed; a SIGTERM reaches the workers.
            raise ValueError("time_limit_action 'checkpoint' needs launch: srun (torchrun's agent "
                             "does not forward USR2); use 'stop' (SIGTERM reaches the workers) "
                             "or 'auto'")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): v if isinstance(v, str) else json.dumps(v, default=str) for k, v in value.items()}
        return value

    @property
    def allocated_nodes(self) -> int:
        """Nodes the job asks Slurm for: the training nodes and the spares."""
        return self.nodes + self.fault_tolerance.spare_count

    @property
    def argv(self) -> list[str]:
        """The training command as an argument list (a string runs under ``bash -c``)."""
        return ["bash", "-c", self.command] if isinstance(self.command, str) else list(self.command)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json(cls, text: str) -> TrainSpec:
        return cls.model_validate_json(text)


# ------------------------------------------------------------ launchers

#: Words that run the next word as the command (``env X=1 srun ...``, ``exec torchrun``).
_WRAPPERS = ("env", "exec", "nohup", "time", "command", "nice", "stdbuf", "timeout")
_SHELL_OPERATORS = {";", "&&", "||", "|", "&", "(", ")", "|&", ";;", "\n"}


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")


def _strip_wrappers(cmd: list[str]) -> list[str]:
    """``env X=1 timeout 10 srun ...`` -> ``srun ...``."""
    i = 0
    while i < len(cmd):
        if _ASSIGNMENT.fullmatch(cmd[i]):
            i += 1
        elif Path(cmd[i]).name in _WRAPPERS:
            i += 1
            while i < len(cmd) and (cmd[i].startswith("-") or _ASSIGNMENT.fullmatch(cmd[i])
                                    or re.fullmatch(r"[0-9.]+[smhd]?", cmd[i])):
                i += 1
        else:
            break
    return cmd[i:]


def _command_words(words: list[str]) -> list[list[str]]:
    """The simple commands of a shell word list: split at operators, wrappers dropped."""
    commands: list[list[str]] = [[]]
    for word in words:
        if word in _SHELL_OPERATORS or (word and set(word) <= set(";&|()")):
            commands.append([])
        else:
            commands[-1].append(word)
    return [cmd for cmd in (_strip_wrappers(c) for c in commands) if cmd]


def _shell_words(text: str) -> list[str]:
    lexer = shlex.shlex(text.replace("\n", " ; "), posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: bash will say so at run time
        return text.split()


def _launcher_in(commands: list[list[str]]) -> str | None:
    for cmd in commands:
        name = Path(cmd[0]).name
        if name in LAUNCHERS:
            return name
        if re.fullmatch(r"python[0-9.]*", name):
            for flag, module in itertools.pairwise(cmd[1:]):
                if flag == "-m" and module in _TORCH_RUN_MODULES:
                    return f"python -m {module}"
        if name in ("bash", "sh", "zsh", "dash") and "-c" in cmd[1:-1]:
            inner = _launcher_in(_command_words(_shell_words(cmd[cmd.index("-c") + 1])))
            if inner:
                return inner
    return None


def nested_launcher(command: list[str] | str, launch: str) -> str | None:
    """Why ``command`` must not start a launcher of its own (None when it does not).

    The supervisor runs the command under its own srun step (and torchrun with
    ``launch: torchrun``); a command that starts srun, sbatch or torchrun again nests
    a launcher inside a step and hangs silently or runs N x N processes.
    """
    if isinstance(command, str):
        found = _launcher_in(_command_words(_shell_words(command)))
    else:  # an argv runs as-is: only its first word is a command
        found = _launcher_in([_strip_wrappers(list(command))])
    if found is None:
        return None
    if found in ("sbatch", "salloc"):
        return (f"command runs `{found}`, but `sacme submit` is the sbatch of this run: give the "
                "training command itself (e.g. command: [python, train.py])")
    if found in ("srun", "mpirun", "mpiexec"):
        return (f"command starts `{found}`, but the supervisor already runs the command with srun "
                "on every node: drop it and set the shape with nodes and ntasks_per_node "
                "(e.g. command: [python, train.py]; or launch: torchrun)")
    if launch == "torchrun":
        return (f"command starts `{found}`, but launch: torchrun already starts one torchrun agent "
                "per node: give only the script and its arguments (e.g. command: [train.py, --lr, "
                "'1e-4'])")
    return (f"command starts `{found}` inside the supervisor's srun step: set `launch: torchrun` "
            "and give only the script (e.g. command: [train.py]); the supervisor starts one "
            "torchrun agent per node with the rendezvous from the allocation")


# ---------------------------------------------------------------- loading

def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the field at ``loc`` (for listing valid keys)."""
    for part in loc:
        field = model.model_fields.get(str(part)) or next(
            (f for f in model.model_fields.values() if f.alias == part), None)
        if field is None:
            return None
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        else:
            return None
    return model


def _valid_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _node_line(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at ``loc`` (the deepest one that exists)."""
    import yaml

    node, line = root, (root.start_mark.line + 1 if root is not None else None)
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == str(part):
                    node, line = value, key.start_mark.line + 1
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _describe(error: Mapping[str, Any]) -> str:
    loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p in {"str", "list[str]"}))
    field = ".".join(str(p) for p in loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        owner = _model_at(TrainSpec, loc[:-1])
        valid = ", ".join(_valid_keys(owner)) if owner else "?"
        return f"unknown field {field!r} (valid: {valid})"
    if error["type"] == "missing":
        return f"missing field {field!r}"
    msg = error['msg'].removeprefix('Value error, ')
    return f"field {field!r}: {msg} (got {error.get('input')!r})"


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``--set a.b=value``: value read as YAML (``--set nodes=4`` is an int)."""
    import yaml

    out = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--set {item!r}: expected key=value (e.g. --set nodes=4)")
        try:
            _refuse_aliases(raw, f"--set {item!r}")
            value = yaml.safe_load(raw) if raw else ""
        except (yaml.YAMLError, RecursionError):
            value = raw
        parts = key.strip().split(".")
        target = out
        for part in parts[:-1]:
            nxt = target.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise InputError(f"--set {item!r}: {part!r} is not a section")
            target = nxt
        target[parts[-1]] = value
    return out


def _refuse_aliases(text: str, source: str) -> None:
    """Refuse anchors, aliases and deep nesting before anything is built: the event
    stream is read lazily and stops at the first offence, so the cost stays bounded."""
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        line = event.start_mark.line + 1 if event.start_mark is not None else "?"
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise InputError(f"{source}:{line}: YAML anchors and aliases "
                             f"are not allowed in a spec")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_SPEC_DEPTH:
                raise InputError(f"{source}:{line}: nested deeper than "
                                 f"{MAX_SPEC_DEPTH} levels; not a train.yaml")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def parse_spec(text: str, source: str, overrides: list[str] | None = None) -> TrainSpec:
    """Validate a ``train.yaml`` text; every error is one line naming file, line, field."""
    import yaml

    if len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise InputError(f"{source}: larger than {MAX_SPEC_BYTES} bytes; not a train.yaml")
    try:
        _refuse_aliases(text, source)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{source}{where}: not valid YAML: {problem}") from None
    except RecursionError:
        raise InputError(f"{source}: not valid YAML: nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping of fields at the top level "
                         f"(valid: {', '.join(_valid_keys(TrainSpec))})")
    data = apply_overrides(data, overrides or [])
    try:
        return TrainSpec.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"])
        overridden = [o for o in overrides or [] if o.partition("=")[0].strip() == field]
        if overridden:
            raise InputError(f"{source}: --set {overridden[-1]}: {_describe(error)}") from None
        line = _node_line(root, tuple(error["loc"]))
        where = f":{line}" if line else ""
        raise InputError(f"{source}{where}: {_describe(error)}") from None


def load_spec(path: str | Path, overrides: list[str] | None = None) -> TrainSpec:
    """Read and validate a ``train.yaml`` file."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
        if len(raw) > MAX_SPEC_BYTES:
            raise InputError(f"{path}: larger than {MAX_SPEC_BYTES} bytes; not a train.yaml")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    return parse_spec(text, str(path), overrides)
