"""``Slurm``: typed methods over Slurm's commands, all through :func:`run_slurm`.

Every method builds an argument list (values are never interpreted by a
shell), runs it with a timeout and returns records from :mod:`.parse`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Protocol

from slurm_acme.slurm import parse
from slurm_acme.slurm.errors import JobNotFound, SlurmError, SlurmUnavailable
from slurm_acme.slurm.records import NodeEvent, NodeInfo, QueueJob, SacctJob, ScontrolJob, ScontrolNode
from slurm_acme.slurm.runner import run_slurm


class Runner(Protocol):
    def __call__(self, argv: Sequence[str], *, timeout: float,
                 env: Mapping[str, str] | None = None, stdin: str | None = None) -> str: ...


_FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9_:/]*$")


_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _check_node_value(node: str, reason: str) -> None:
    """One plain node name (no hostlist, no option), and a reason of printable text."""
    if not _NODE_NAME.match(node):
        raise ValueError(f"not a single node name: {node!r}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in reason):
        raise ValueError(f"a drain reason may not hold control characters: {reason!r}")


def slurm_time(moment: datetime) -> str:
    """A datetime as Slurm's commands read it (local wall-clock time)."""
    local = moment.astimezone() if moment.tzinfo else moment
    return local.strftime("%Y-%m-%dT%H:%M:%S")


def sbatch_argv(options: Sequence[str], dependency: str | None = None) -> list[str]:
    """The exact argv :meth:`Slurm.sbatch` runs (script path or stdin aside), for dry runs."""
    return ["sbatch", "--parsable", *options] + ([f"--dependency={dependency}"] if dependency else [])


class Slurm:
    """The one door to Slurm. Construct freely: nothing runs until a method is called."""

    def __init__(self, *, timeout: float = 60.0, runner: Runner = run_slurm,
                 env: Mapping[str, str] | None = None) -> None:
        self.timeout = timeout
        self._runner = runner
        self._env = dict(env) if env is not None else None

    def _run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
             stdin: str | None = None) -> str:
        merged = {**(self._env or {}), **(env or {})} if (self._env or env) else None
        return self._runner(list(argv), timeout=self.timeout, env=merged, stdin=stdin)

    # ------------------------------------------------------------ submit
    def sbatch(self, options: Sequence[str], script: str | Path, *,
               env: Mapping[str, str] | None = None) -> str:
        """Submit; return the job id. ``script`` is a file (``Path``) or the script text."""
        argv = sbatch_argv(options)
        if isinstance(script, Path):
            return parse.parse_sbatch_parsable(self._run([*argv, str(script)], env=env))
        return parse.parse_sbatch_parsable(self._run(argv, env=env, stdin=script))

    # ------------------------------------------------------------- query
    def squeue(self, job_ids: Iterable[str | int] | None = None,
               user: str | None = None) -> list[QueueJob]:
        argv = ["squeue", "--json"]
        wanted = {str(j) for j in job_ids} if job_ids is not None else None
        if wanted is not None:
            if not wanted:
                return []
            argv += ["--jobs", parse.join_ids(sorted(wanted))]
        if user:
            argv += ["--user", user]
        try:
            jobs = parse.parse_squeue_json(self._run(argv))
        except SlurmError as exc:
            if wanted and "Invalid job id" in exc.stderr:
                return []
            raise
        if wanted is not None:  # some versions ignore --jobs with --json
            jobs = [j for j in jobs if j.job_id in wanted or j.array_job_id in wanted]
        if user:
            jobs = [j for j in jobs if j.user == user]
        return jobs

    def sacct(self, start: datetime, end: datetime | None = None,
              job_ids: Iterable[str | int] | None = None,
              all_users: bool = True) -> list[SacctJob]:
        """Job allocations (steps dropped) active at any time in ``[start, end]``."""
        window = ["-S", slurm_time(start)] + (["-E", slurm_time(end)] if end else [])
        window += ["-a"] if all_users else []
        if job_ids is not None:
            ids = [str(j) for j in job_ids]
            if not ids:
                return []
            window += ["-j", parse.join_ids(ids)]
        doc = parse.load_json(self._run(["sacct", "--json", "-X", *window]), "sacct")
        jobs = parse.parse_sacct_json(doc)
        if parse.plugin_version(doc).endswith("v0.0.38") and jobs:
            jobs = self._with_real_exit_codes(jobs, window)
        return jobs

    def _with_real_exit_codes(self, jobs: list[SacctJob], window: list[str]) -> list[SacctJob]:
        """Slurm 22.05's JSON says 0 for every exit code; read them from the plain listing."""
        out = self._run(["sacct", "-n", "-P", "-X", "-D", "-o", "JobIDRaw,ExitCode", *window])
        codes = parse.parse_sacct_exit_codes(out)
        return [replace(j, exit_code=codes[j.job_id][0], signal=codes[j.job_id][1])
                if j.job_id in codes else j for j in jobs]

    def show_job(self, job_id: str | int) -> ScontrolJob:
        try:
            jobs = parse.parse_scontrol_show_job(self._run(["scontrol", "show", "job", "-o", str(job_id)]))
        except SlurmError as exc:
            if "Invalid job id" in exc.stderr:
                raise JobNotFound(exc.argv, exc.returncode, exc.stderr,
                                  f"Slurm does not know job {job_id} (finished too long ago?)") from None
            raise
        if not jobs:
            raise JobNotFound(["scontrol", "show", "job"], 0, "", f"Slurm does not know job {job_id}")
        return jobs[0]

    def show_hostnames(self, hostlist: str) -> list[str]:
        if not hostlist:
            return []
        return parse.parse_hostnames(self._run(["scontrol", "show", "hostnames", hostlist]))

    def job_gpu_indices(self, job_id: str | int) -> dict[str, list[int]]:
        """GPU indices the job holds on each of its nodes (``scontrol -d show job``)."""
        text = self._run(["scontrol", "-d", "-o", "show", "job", str(job_id)])
        return {node: indices for hostlist, indices in parse.parse_job_gpu_groups(text)
                for node in self.show_hostnames(hostlist)}

    def job_gpus_on_node(self, job_id: str | int, node: str) -> tuple[int, ...] | None:
        """GPU indices the job holds on ``node`` (None: not one of its nodes); one scontrol call."""
        return parse.gpu_indices_on(self._run(["scontrol", "-d", "-o", "show", "job", str(job_id)]), node)

    def show_nodes(self, names: Iterable[str] | None = None) -> list[ScontrolNode]:
        """``scontrol show node -o`` for ``names`` (hostlists welcome), or every node."""
        wanted = [str(n) for n in names] if names is not None else None
        if wanted == []:
            return []
        argv = ["scontrol", "show", "node", "-o"] + ([",".join(wanted)] if wanted else [])
        return parse.parse_scontrol_show_node(self._run(argv))

    def node_addresses(self, names: Iterable[str]) -> dict[str, str]:
        """{node name: ``NodeAddr``} for ``names``; nodes without a NodeAddr are left out."""
        return parse.node_addresses(self.show_nodes(names))

    def show_config(self) -> dict[str, str]:
        """The controller's running configuration (``scontrol show config``)."""
        return parse.parse_scontrol_show_config(self._run(["scontrol", "show", "config"]))

    def controller_time(self) -> int:
        """slurmctld's clock in Unix seconds (``sdiag``'s header; 1 s resolution)."""
        return parse.parse_sdiag_time(self._run(["sdiag"]))

    def node_events(self, nodes: Iterable[str], since: datetime) -> list[NodeEvent]:
        """The state changes slurmdbd recorded for ``nodes`` since ``since`` (``sacctmgr list event``).

        Why: a node that was set DOWN can be back in service within milliseconds
        (``ReturnToService=2`` and a live slurmd); its DOWN event is still on record.
        """
        names = sorted(set(nodes))
        if not names:
            return []
        out = self._run(["sacctmgr", "-n", "-P", "list", "event", f"nodes={','.join(names)}",
                         f"start={slurm_time(since)}", f"format={parse.EVENT_FORMAT}"])
        return parse.parse_sacctmgr_events(out)

    def sinfo_nodes(self) -> list[NodeInfo]:
        return parse.parse_sinfo_nodes(self._run(["sinfo", "-N", "-h", "-o", parse.SINFO_FORMAT]))

    def ping(self) -> None:
        """Raise :class:`SlurmUnavailable` unless slurmctld answers."""
        argv = ["scontrol", "ping"]
        try:
            out = self._run(argv)
        except SlurmError as exc:
            raise SlurmUnavailable(exc.argv, exc.returncode, exc.stderr,
                                   f"slurmctld is not answering: {exc}") from None
        if " is UP" not in out:
            raise SlurmUnavailable(argv, 0, out, f"slurmctld is not answering: {out.strip()}")

    # ------------------------------------------------------------ change
    def update_job(self, job_id: str | int, **fields: str | int) -> None:
        """``scontrol update JobId=N Key=Value ...``; keys are Slurm's (``ExcNodeList=...``)."""
        pairs = []
        for key, value in fields.items():
            if not _FIELD.match(key) or "\n" in str(value):
                raise ValueError(f"not a valid scontrol field: {key}={value!r}")
            pairs.append(f"{key}={value}")
        if not pairs:
            raise ValueError("update_job needs at least one field")
        self._run(["scontrol", "update", f"JobId={job_id}", *pairs])

    def drain_node(self, node: str, reason: str) -> None:
        """``scontrol update NodeName=N State=DRAIN Reason=...``: running jobs finish,
        no new ones start. Needs Slurm operator rights (root or SlurmUser)."""
        _check_node_value(node, reason)
        self._run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume_node(self, node: str) -> None:
        """``scontrol update NodeName=N State=RESUME``: back in service."""
        _check_node_value(node, "")
        self._run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    def requeue(self, job_id: str | int, hold: bool = False) -> None:
        self._run(["scontrol", "requeuehold" if hold else "requeue", str(job_id)])

    def release(self, job_id: str | int) -> None:
        self._run(["scontrol", "release", str(job_id)])

    def scancel(self, job_ids: Iterable[str | int], signal: str | None = None) -> None:
        ids = [str(j) for j in job_ids]
        if not ids:
            return
        self._run(["scancel", *(["--signal", signal] if signal else []), *ids])


def default_client(timeout: float = 60.0) -> Slurm:
    """The client for this host: Slurm's own commands, whatever their release.

    No pyslurm path: pyslurm on PyPI is built for libslurm 25.11 only, and no
    Debian suite this project tests against ships 25.11 (README, "Slurm versions").
    """
    return Slurm(timeout=timeout)
