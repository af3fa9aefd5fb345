"""Job steps: one frozen request, one argv builder, one way to launch them.

Callers decide a step's shape (how many nodes and tasks, which job it joins,
whether it shares resources); this module alone knows how ``srun`` spells it.
Values travel as argument-list items, never through a shell, so a node list
or job name holding spaces or quotes reaches srun as the single word it is.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from slurm_acme.errors import InputError
from slurm_acme.slurm.errors import SlurmUnavailable

#: Environment variables srun reads as defaults for options a step sets
#: explicitly; inherited from a batch script's own allocation they contradict
#: the step's shape ("can't honor --ntasks-per-node", "more processors...").
SRUN_INPUT_VARS = (
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
    "SLURM_CPUS_PER_TASK", "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_GPU", "SLURM_MEM_PER_NODE",
    "SLURM_GPUS_PER_TASK", "SLURM_TRES_PER_TASK", "SLURM_DISTRIBUTION", "SLURM_NNODES",
    "SLURM_NODELIST", "SLURM_EXCLUSIVE", "SLURM_OVERCOMMIT",
)

_JOB_ID = re.compile(r"^\d+(?:[_+]\d+)?$")
_NODE = re.compile(r"^[^\s,]+$")


@dataclass(frozen=True)
class StepRequest:
    """The shape of one ``srun`` step; ``None``/``False`` leaves srun's default.

    With ``job_id`` the step joins that allocation; without it srun makes a
    one-off allocation (then ``time_limit`` and ``job_name`` matter).
    ``extra`` holds further ``--option=value`` words, passed through as given.
    """

    job_id: str | None = None
    nodes: int | None = None
    nodelist: tuple[str, ...] = ()
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    gres: str | None = None
    overlap: bool = False
    exact: bool = False
    overcommit: bool = False
    mem: str | None = None
    kill_on_bad_exit: bool = False
    export: str | None = None
    label: bool = False
    unbuffered: bool = False
    quiet: bool = False
    time_limit: str | None = None
    job_name: str | None = None
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.job_id is not None and not _JOB_ID.fullmatch(str(self.job_id)):
            raise InputError(f"step job id: not a Slurm job id: {self.job_id!r}")
        for name in ("nodes", "ntasks", "ntasks_per_node", "cpus_per_task"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise InputError(f"step {name}: must be a whole number >= 1 (got {value!r})")
        if self.gpus_per_node is not None and (not isinstance(self.gpus_per_node, int)
                                               or self.gpus_per_node < 0):
            raise InputError(f"step gpus_per_node: must be >= 0 (got {self.gpus_per_node!r})")
        for node in self.nodelist:
            if not _NODE.fullmatch(node):
                raise InputError(f"step nodelist: not a node name: {node!r}")
        for name in ("gres", "mem", "export", "time_limit", "job_name"):
            value = getattr(self, name)
            if value is not None and ("\n" in value or value == ""):
                raise InputError(f"step {name}: empty or multi-line value {value!r}")
        for word in self.extra:
            if not word.startswith("--") or "\n" in word:
                raise InputError(f"step extra: expected a --option word, got {word!r}")


def step_options(request: StepRequest) -> list[str]:
    """The srun options for ``request``, in a fixed order (no command)."""
    r = request
    argv: list[str] = []
    if r.job_id is not None:
        argv.append(f"--jobid={r.job_id}")
    if r.overlap:
        argv.append("--overlap")
    if r.time_limit is not None:
        argv.append(f"--time={r.time_limit}")
    if r.job_name is not None:
        argv.append(f"--job-name={r.job_name}")
    if r.nodes is not None:
        argv.append(f"--nodes={r.nodes}")
    if r.nodelist:
        argv.append(f"--nodelist={','.join(r.nodelist)}")
    numbers = [("--ntasks", r.ntasks), ("--ntasks-per-node", r.ntasks_per_node),
               ("--cpus-per-task", r.cpus_per_task)]
    argv += [f"{flag}={value}" for flag, value in numbers if value is not None]
    argv += [flag for flag, on in [("--exact", r.exact), ("--overcommit", r.overcommit)] if on]
    if r.mem is not None:
        argv.append(f"--mem={r.mem}")
    if r.gres is not None:
        argv.append(f"--gres={r.gres}")
    if r.gpus_per_node:
        argv.append(f"--gpus-per-node={r.gpus_per_node}")
    if r.kill_on_bad_exit:
        argv.append("--kill-on-bad-exit=1")
    if r.export is not None:
        argv.append(f"--export={r.export}")
    argv += [flag for flag, on in [("--label", r.label), ("--unbuffered", r.unbuffered),
                                   ("--quiet", r.quiet)] if on]
    return argv + list(r.extra)


def step_argv(request: StepRequest, command: Sequence[str]) -> list[str]:
    """``srun OPTIONS COMMAND...`` as an argument list; ``command`` is never parsed."""
    words = [str(c) for c in command]
    if not words:
        raise InputError("step command: empty")
    return ["srun", *step_options(request), *words]


def step_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the variables that would override a step's explicit shape."""
    return {k: v for k, v in environ.items() if k not in SRUN_INPUT_VARS}


def start_step(request: StepRequest, command: Sequence[str], *,
               env: Mapping[str, str] | None = None, stdin: Any = None,
               stdout: int | IO[Any] | None = None, stderr: int | IO[Any] | None = None,
               text: bool = False, errors: str | None = None, bufsize: int = -1,
               start_new_session: bool = False) -> subprocess.Popen[Any]:
    """Launch a (long-running) step and return its process; the caller waits on it.

    Raises :class:`SlurmUnavailable` when ``srun`` is not on ``PATH``.
    """
    argv = step_argv(request, command)
    try:
        return subprocess.Popen(argv, env=dict(env) if env is not None else None, stdin=stdin,
                                stdout=stdout, stderr=stderr, text=text, errors=errors,
                                bufsize=bufsize, start_new_session=start_new_session)
    except FileNotFoundError:
        raise SlurmUnavailable(argv, None, "", "`srun` not found: is Slurm installed and on PATH?") from None


@dataclass(frozen=True)
class StepOutput:
    """What a short step printed; ``returncode`` is None when it ran past its timeout."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_step(request: StepRequest, command: Sequence[str], *, timeout: float,
             env: Mapping[str, str] | None = None) -> StepOutput:
    """Run a short step to the end and return its output, whatever its exit status.

    Unlike :func:`run_slurm` a non-zero exit is not an error here: a step's
    tasks report through stdout even when some of them fail. Raises
    :class:`SlurmUnavailable` only when ``srun`` is not on ``PATH``.
    """
    argv = step_argv(request, command)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=dict(env) if env is not None else None,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        raise SlurmUnavailable(argv, None, "", "`srun` not found: is Slurm installed and on PATH?") from None
    except subprocess.TimeoutExpired as exc:
        return StepOutput(tuple(argv), None, _text(exc.stdout), _text(exc.stderr))
    return StepOutput(tuple(argv), proc.returncode, proc.stdout, proc.stderr)


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


__all__ = ["SRUN_INPUT_VARS", "StepOutput", "StepRequest", "run_step", "start_step", "step_argv",
           "step_env", "step_options"]
