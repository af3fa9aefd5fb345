"""Typed, frozen records of what Slurm reports; parsers build them, callers read them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from slurm_acme.slurm.states import JobState


@dataclass(frozen=True)
class SacctJob:
    """One job allocation from accounting (steps dropped; requeues folded in)."""

    job_id: str
    cluster: str
    user: str
    name: str
    partition: str
    account: str
    comment: str
    nodes: int
    nodelist: str
    gpus: int
    cpus: int
    submit: datetime | None
    eligible: datetime | None
    start: datetime | None
    end: datetime | None
    state: JobState
    exit_code: int
    signal: int | None = None
    restarts: int = 0
    array_job_id: str | None = None
    array_task_id: int | None = None
    alloc_tres: str = ""
    reason: str = ""

    @property
    def display_id(self) -> str:
        """``ARRAY_TASK`` for array elements (as squeue shows them), else the job id."""
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id


@dataclass(frozen=True)
class QueueJob:
    """One job in slurmctld's queue, from ``squeue --json``."""

    job_id: str
    name: str
    user: str
    partition: str
    account: str
    state: JobState
    reason: str
    nodes: int
    nodelist: str
    gpus: int
    cpus: int
    comment: str
    submit: datetime | None
    start: datetime | None
    end: datetime | None
    restarts: int = 0
    array_job_id: str | None = None
    array_task_id: int | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class ScontrolRecord:
    """One line of ``scontrol show ... -o``: its ``Key=Value`` pairs as Slurm printed them.

    Subclasses add typed views; every other key stays readable through :meth:`get`.
    """

    fields: dict[str, str] = field(hash=False)

    def get(self, key: str, default: str = "") -> str:
        return self.fields.get(key, default)


@dataclass(frozen=True)
class ScontrolJob(ScontrolRecord):
    """``scontrol show job -o``: every ``Key=Value`` pair, plus typed views of the common ones."""

    @property
    def job_id(self) -> str:
        return self.get("JobId")

    @property
    def name(self) -> str:
        return self.get("JobName")

    @property
    def state(self) -> JobState:
        return JobState.parse(self.get("JobState"))

    @property
    def reason(self) -> str:
        return self.get("Reason")

    @property
    def restarts(self) -> int:
        return int(self.get("Restarts", "0") or 0)

    @property
    def nodelist(self) -> str:
        value = self.get("NodeList")
        return "" if value in ("(null)", "None") else value

    @property
    def excluded(self) -> str:
        value = self.get("ExcNodeList")
        return "" if value in ("(null)", "None") else value

    @property
    def comment(self) -> str:
        value = self.get("Comment")
        return "" if value == "(null)" else value

    @property
    def exit_code(self) -> int | None:
        code, _, _ = self.get("ExitCode").partition(":")
        return int(code) if code.isdigit() else None


@dataclass(frozen=True)
class ScontrolNode(ScontrolRecord):
    """``scontrol show node -o``: every ``Key=Value`` pair, plus the ones callers need."""

    @property
    def name(self) -> str:
        return self.get("NodeName")

    @property
    def addr(self) -> str:
        """Where to reach the node (``NodeAddr``, else its hostname, else its name)."""
        return self.get("NodeAddr") or self.get("NodeHostName") or self.name

    @property
    def hostname(self) -> str:
        return self.get("NodeHostName") or self.name

    @property
    def port(self) -> int | None:
        value = self.get("Port")
        return int(value) if value.isdigit() else None

    @property
    def state(self) -> str:
        """``IDLE``, ``MIXED``, ``DOWN+DRAIN``, ... as scontrol prints it."""
        return self.get("State")

    @property
    def gres(self) -> str:
        value = self.get("Gres")
        return "" if value == "(null)" else value

    @property
    def reason(self) -> str:
        """Why the node is drained or down, without Slurm's ``[user@time]`` suffix."""
        return re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", self.get("Reason")).strip()

    @property
    def drained(self) -> bool:
        """Draining or drained (``IDLE+DRAIN``, ``MIXED+DRAIN``, ``DRAINING``, ...)."""
        return "DRAIN" in self.state.upper()

    @property
    def unavailable(self) -> bool:
        """Out of service for new jobs: drained, down or failed."""
        return any(word in self.state.upper() for word in ("DRAIN", "DOWN", "FAIL"))


@dataclass(frozen=True)
class NodeEvent:
    """A node state change slurmdbd recorded (``sacctmgr list event``): kept after the node is back."""

    node: str
    start: datetime | None
    state: str
    reason: str = ""

    @property
    def down(self) -> bool:
        """A DOWN or FAIL event (a DRAIN lets the node's running jobs finish)."""
        return self.state.upper().rstrip("*~#!%$@^-").startswith(("DOWN", "FAIL"))


@dataclass(frozen=True)
class NodeInfo:
    """A node and its state as ``sinfo -N`` reports it (``idle``, ``down*``, ...)."""

    name: str
    state: str
    gres: str = ""

    @property
    def responding(self) -> bool:
        return not self.state.endswith("*")
