"""``sacme supervise``: the in-job supervisor that the batch script execs.

One attempt, start to end: record it, learn what the previous attempt left,
find the newest checkpoint (the trainer's own or slurm-acme's), health-check
the allocation, launch the trainer (srun or torchrun), watch it
(:class:`slurm_acme.ft.watch.StepWatch`), then decide -- complete, requeue
excluding culprits, roll back past a loss spike, or stop -- and record the
decision before acting on it.

The attempt is built from steps that an in-allocation restart can repeat:
:meth:`Supervisor._run_step` launches and watches one training step from a
resume point, :meth:`Supervisor._decide` turns its end into a decision; only
:meth:`Supervisor._finish` leaves the allocation.

With ``fault_tolerance.spares: K`` (issue 19) the job holds ``nodes + K``
nodes and trains on ``nodes``; a failure that a restart may fix is recovered
without leaving the allocation (:meth:`Supervisor._in_place`): the suspects are
health-checked against known-good nodes, a spare takes each failed node's
place, and the next attempt starts in the same job from the newest healthy
checkpoint on a new rendezvous port. Each such restart is an attempt of its
own (outcome ``restarted``) and counts against ``max_restarts``; with no
spare left for a failed node the job is requeued excluding it, as without spares.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from slurm_acme.config import NodesConfig
from slurm_acme.contracts import REQUEUE_HELPER_LOG, AttemptFile, attempt_file
from slurm_acme.diagnose import Diagnosis
from slurm_acme.errors import AcmeError, InputError, StoreError
from slurm_acme.ft import policy
from slurm_acme.ft.checkpoints import Checkpoint, find_checkpoints
from slurm_acme.ft.launch import (
    Launch,
    local_node,
    node_addr,
    rendezvous_port,
    resolve_address,
    step_request,
    training_command,
    training_env,
)
from slurm_acme.ft.progress import compile_patterns
from slurm_acme.ft.requeue import spawn_detached
from slurm_acme.ft.spec import TrainSpec
from slurm_acme.ft.states import AttemptOutcome, RunState
from slurm_acme.ft.watch import Signals, StepWatch
from slurm_acme.health.records import HealthReport
from slurm_acme.nodes.policy import decisive_nodes
from slurm_acme.slurm import JobState, Slurm, SlurmError, start_step, step_env
from slurm_acme.store import Store
from slurm_acme.store import failures as failure_store
from slurm_acme.store import nodes as node_store
from slurm_acme.store import runs as run_store

__all__ = ["JobContext", "Signals", "Supervisor", "health_check"]


@dataclass(frozen=True)
class JobContext:
    """Who we are, from the environment Slurm gives the batch script."""

    run_id: str
    job_id: str
    attempt: int
    nodelist: str
    cluster: str
    run_dir: str
    workdir: str
    #: The node the supervisor runs on (the batch host).
    here: str = ""

    @classmethod
    def from_env(cls, run_id: str, env: Mapping[str, str], run_dir: str,
                 workdir: str) -> JobContext:
        job_id = env.get("SLURM_JOB_ID")
        if not job_id:
            raise InputError("sacme supervise runs inside a Slurm batch job (no SLURM_JOB_ID)")
        return cls(run_id=run_id, job_id=job_id, attempt=int(env.get("SLURM_RESTART_COUNT") or 0),
                   nodelist=env.get("SLURM_JOB_NODELIST", ""),
                   cluster=env.get("SLURM_CLUSTER_NAME", ""), run_dir=run_dir,
                   workdir=workdir, here=local_node(env))

    def path(self, kind: AttemptFile) -> Path:
        return attempt_file(self.run_dir, self.attempt, self.job_id, kind)


def health_check(nodes: Sequence[str], *, job_id: str | None, timeout_s: float,
                 gpus_per_node: int | None = None,
                 known_good: Sequence[str] = ()) -> HealthReport:
    """Two-round allgather bisection over ``nodes`` inside the job's allocation; with
    ``known_good``, each of ``nodes`` is paired with one of those instead."""
    from slurm_acme.health.check import run_health_check

    return run_health_check(list(nodes), timeout_s=timeout_s, job_id=job_id,
                            gpus_per_node=gpus_per_node or None, known_good=known_good)


def _counts_as_restart(a: run_store.AttemptRow) -> bool:
    recorded = a.details.get("counts_as_restart")
    if isinstance(recorded, bool):
        return recorded
    outcome = AttemptOutcome.parse(a.outcome)
    return outcome is not None and outcome.counts_as_restart


@dataclass
class Supervisor:
    """One attempt of a run inside its batch job; the boundaries (Slurm, health check,
    checkpoints on disk, the requeue helper, signals) are fields so tests can fake them."""

    store: Store
    slurm: Slurm
    spec: TrainSpec
    ctx: JobContext
    health: Callable[..., HealthReport] = health_check
    checkpoints: Callable[[str, Sequence[str]], list[Checkpoint]] = find_checkpoints
    spawn: Callable[..., None] = spawn_detached
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    signals: Signals = field(default_factory=Signals)
    poll_s: float = 0.5
    log: Callable[[str], None] = print
    #: How long to wait for the requeue helper to end this job before exiting anyway.
    requeue_wait_s: float = 120.0
    #: The client for queries after a SIGTERM: they must fit in Slurm's KillWait (30 s by
    #: default) before the SIGKILL, so it has a short timeout; None: ``slurm``.
    after_term: Slurm | None = None
    #: The drain policy whose window and decisive events say which ledger nodes a new
    #: attempt keeps off; None: the trusted system config's, read when first needed.
    node_policy: NodesConfig | None = None
    #: Nodes Slurm reported down the moment the SIGTERM arrived (see Signals.on_term).
    _down_at_term: tuple[str, ...] = field(default=(), init=False, repr=False)
    _step_started: float = field(default=0.0, init=False, repr=False)

    @property
    def ckpt_dir(self) -> str:
        return str(Path(self.ctx.workdir) / Path(self.spec.checkpoint.dir).expanduser())

    # ------------------------------------------------------------ run
    def run(self) -> int:
        ctx = self.ctx
        Path(ctx.run_dir).mkdir(parents=True, exist_ok=True)
        allocated = self.slurm.show_hostnames(ctx.nodelist) if ctx.nodelist else []
        self._number_after_in_place()
        history = self._history()
        nodes, spares = self._split(allocated, history)
        budget, skip, resume = self._carried(history)
        start = self._record_start(nodes, history, resume, skip, spares)
        self.signals.install()

        before = self._before_launch(allocated, history, budget)
        if before is not None:
            return self._finish(before, start=start, history=history, end=None, nodes=nodes)
        while True:
            end = self._run_step(nodes, resume, skip)
            decision = self._decide(end, nodes, budget, spares)
            swap = self._in_place(decision, end, spares)
            if swap is None:
                return self._finish(decision, start=start, history=history, end=end,
                                    nodes=nodes)
            nodes, spares = self._restart_in_place(decision, swap, start=start, end=end,
                                                   nodes=nodes, spares=spares)
            self.ctx = replace(self.ctx, attempt=self.ctx.attempt + 1)
            history = self._earlier()
            budget, skip, resume = self._carried(history)
            start = self._record_start(nodes, history, resume, skip, spares)

    def _carried(self, history: Sequence[run_store.AttemptRow]
                 ) -> tuple[policy.Budget, str, Checkpoint | None]:
        """What earlier attempts hand this one: restarts used, steps to skip, where to resume."""
        ft = self.spec.fault_tolerance
        budget = policy.Budget(
            restarts_used=sum(1 for a in history if _counts_as_restart(a)),
            unknown_used=sum(1 for a in history if a.details.get("unknown")),
            max_restarts=ft.max_restarts, max_unknown_restarts=ft.max_unknown_restarts)
        skip = policy.merge_skips(*(policy.parse_skips(a.details.get("add_skip")) for a in history))
        return budget, skip, self._resume_point(history)

    def _split(self, allocated: Sequence[str], history: Sequence[run_store.AttemptRow]
               ) -> tuple[list[str], list[str]]:
        """(training nodes, idle spares) of the allocation: with ``spares`` the first
        ``nodes`` usable ones train; without, every allocated node does."""
        if not self.spec.fault_tolerance.in_place:
            return list(allocated), []
        excluded = self._carried_exclusions(history)
        usable = [n for n in allocated if n not in excluded]
        return usable[:self.spec.nodes], usable[self.spec.nodes:]

    def _number_after_in_place(self) -> None:
        """In-place restarts numbered attempts past ``SLURM_RESTART_COUNT`` in this job id:
        after a requeue, this attempt comes after them."""
        mine = [a for a in run_store.list_attempts(self.store, self.ctx.run_id)
                if a.job_id == self.ctx.job_id]
        if any(AttemptOutcome.parse(a.outcome) is AttemptOutcome.RESTARTED for a in mine):
            self.ctx = replace(self.ctx, attempt=max(self.ctx.attempt,
                                                     1 + max(a.attempt for a in mine)))

    # -------------------------------------------------------- previous
    def _history(self) -> list[run_store.AttemptRow]:
        """Earlier attempts of this run; one that left no decision is closed first."""
        history = self._earlier()
        if history and (history[-1].end_ts is None
                        or AttemptOutcome.parse(history[-1].outcome) is AttemptOutcome.KILLED):
            if self._close_lost(history[-1]):
                history = self._earlier()
        if history:
            prev = history[-1]
            self.log(f"previous attempt {prev.attempt} (job {prev.job_id}) on {prev.nodelist}: "
                     f"{prev.outcome}: {prev.details.get('reason', '-')}")
        return history

    def _earlier(self) -> list[run_store.AttemptRow]:
        ctx = self.ctx
        return [a for a in run_store.list_attempts(self.store, ctx.run_id)
                if (a.attempt, a.job_id) != (ctx.attempt, ctx.job_id)]

    def _resume_point(self, history: Sequence[run_store.AttemptRow]) -> Checkpoint | None:
        rollbacks = [(a.end_ts or 0.0, int(a.details["rollback_before"]))
                     for a in history if a.details.get("rollback_before") is not None]
        return policy.resume_point(self._on_disk(), rollbacks)

    def _on_disk(self) -> list[Checkpoint]:
        try:
            return self.checkpoints(self.ckpt_dir, self.spec.checkpoint.glob)
        except (OSError, ValueError) as exc:
            self.log(f"cannot list checkpoints in {self.ckpt_dir}: {exc}")
            return []

    def _record_start(self, nodes: Sequence[str], history: Sequence[run_store.AttemptRow],
                      resume: Checkpoint | None, skip: str, spares: Sequence[str] = ()) -> float:
        ctx = self.ctx
        start = time.time()
        run_store.start_attempt(self.store, run_id=ctx.run_id, attempt=ctx.attempt,
                                job_id=ctx.job_id, nodelist=",".join(nodes), start_ts=start,
                                resumed_from_step=resume.step if resume else None,
                                resumed_from=resume.path if resume else None, skip_steps=skip)
        run_store.update_run(self.store, ctx.run_id, state=RunState.RUNNING.value,
                             last_job_id=ctx.job_id)
        if history and history[-1].failure_id:
            run_store.set_failure_recovery(self.store, history[-1].failure_id,
                                           start - (history[-1].end_ts or start))
        where = f"{resume.path} ({resume.kind}, step {resume.step})" if resume else "scratch"
        idle = f" (spares {','.join(spares) or 'none left'})" if self.spec.fault_tolerance.in_place \
            else ""
        self.log(f"attempt {ctx.attempt} of run {ctx.run_id} (job {ctx.job_id}) on "
                 f"{','.join(nodes)}{idle}; resume from {where}; skip {skip or '-'}")
        return start

    def _down_nodes(self, nodes: Sequence[str], slurm: Slurm | None = None) -> tuple[str, ...]:
        """Those of ``nodes`` that Slurm reports down, drained, failed or not responding."""
        try:
            states = {n.name: n for n in (slurm or self.slurm).sinfo_nodes()}
        except SlurmError as exc:
            self.log(f"cannot read node states: {exc}")
            return ()
        return tuple(n for n in nodes if (info := states.get(n)) is not None and (
            not info.responding or info.state.startswith(("down", "drain", "fail"))))

    def _close_lost(self, prev: run_store.AttemptRow) -> bool:
        """The previous attempt ended without a decision (its supervisor was killed), or was
        killed by Slurm: a node that is down now failed it. True when the row changed."""
        down = self._down_nodes((prev.nodelist or "").split(","))
        if not down and prev.end_ts is not None:
            return False  # killed, recorded as such, and no node is down: nothing to add
        failure_id = prev.failure_id
        decision = policy.ended_by_slurm(None, down)
        if down and failure_id is None:
            failure_id = self._record_failure(decision.diagnosis, job_id=prev.job_id,
                                              attempt=prev.attempt, ts=prev.end_ts or time.time(),
                                              since=prev.start_ts, gpus=None, log_path=None)
        outcome = AttemptOutcome.NODE_FAIL if down else AttemptOutcome.LOST
        reason = decision.reason if down else prev.details.get(
            "reason", "ended without a decision (killed); Slurm requeued the job")
        run_store.end_attempt(self.store, run_id=prev.run_id, attempt=prev.attempt,
                              job_id=prev.job_id, end_ts=prev.end_ts or time.time(),
                              outcome=outcome.value, exit_code=prev.exit_code,
                              excluded=sorted(set(prev.excluded) | set(down)),
                              last_step=prev.last_step, time_lost_s=prev.time_lost_s,
                              failure_id=failure_id, detail={**prev.details, "reason": reason})
        return True

    def _carried_exclusions(self, history: Sequence[run_store.AttemptRow]) -> set[str]:
        return {n for a in history for n in a.excluded} | set(self.spec.fault_tolerance.exclude)

    def _before_launch(self, nodes: Sequence[str], history: Sequence[run_store.AttemptRow],
                       budget: policy.Budget) -> policy.Decision | None:
        """A decision made before the trainer starts: the allocation holds a node an earlier
        attempt excluded, or the pre-flight health check found bad nodes."""
        clash = sorted(set(nodes) & self._carried_exclusions(history))
        if clash:
            return policy.Decision(AttemptOutcome.REQUEUE, f"allocation holds excluded node(s) "
                                   f"{','.join(clash)}: requeue without them",
                                   exclude=tuple(clash), counts_as_restart=False)
        marked = sorted(self._ledger_exclusions(nodes))
        if marked:
            return policy.Decision(AttemptOutcome.REQUEUE, f"the node-health ledger has recent decisive "
                                   f"events on {','.join(marked)}: requeue without them",
                                   exclude=tuple(marked), counts_as_restart=False)
        if self.spec.fault_tolerance.health_check != "allgather" or len(nodes) < 2:
            return None
        bad = self._health(nodes, "pre-flight")
        if not bad:
            return None
        finding = Diagnosis(category="health_check", origin="infrastructure",
                            action="requeue_exclude_node", node=bad[0], confidence=1.0,
                            evidence=(f"pre-flight allgather failed on {','.join(bad)}",),
                            source="health")
        decision = policy.decide(policy.AttemptEnd(exit_code=None, diagnosis=finding), budget)
        if not decision.requeues:
            return decision
        return policy.Decision(AttemptOutcome.REQUEUE, f"pre-flight health check: bad node(s) "
                               f"{','.join(bad)}", exclude=tuple(bad), diagnosis=finding)

    def _ledger_exclusions(self, nodes: Sequence[str]) -> set[str]:
        """Nodes of this allocation with a decisive event (an XID 79, an uncorrectable
        ECC error, ...) in the ledger's window, drained yet or not: any job's, not
        only this run's. A store that cannot say costs a log line, not the attempt."""
        if not nodes:
            return set()
        if self.node_policy is None:
            from slurm_acme.config import system_config

            self.node_policy = system_config().nodes
        try:
            histories = node_store.histories(self.store, cluster=self.ctx.cluster, nodes=nodes)
        except StoreError as exc:
            self.log(f"cannot read the node-health ledger: {exc}")
            return set()
        return decisive_nodes(histories, self.node_policy, time.time())

    def _record_health(self, bad: Sequence[str], why: str) -> None:
        """Each node a health check flagged is a ledger event (source ``health``)."""
        now = time.time()
        events = [node_store.NodeEvent(cluster=self.ctx.cluster, node=node, ts=now, source="health",
                                       category="HealthCheck", code=f"allgather:{why}",
                                       job_id=self.ctx.job_id, run_id=self.ctx.run_id,
                                       evidence=(f"{why} allgather health check failed on {node}",))
                  for node in bad]
        try:
            node_store.record_events(self.store, events)
        except StoreError as exc:
            self.log(f"cannot record the health check in the node-health ledger: {exc}")

    # ---------------------------------------------------------- health
    def _health(self, nodes: Sequence[str], why: str,
                known_good: Sequence[str] = ()) -> list[str]:
        paired = f", each paired with one of {','.join(known_good)}" if known_good else ""
        self.log(f"{why} health check on {','.join(nodes)}{paired}")
        extra = {"known_good": tuple(known_good)} if known_good else {}
        try:
            result = self.health(nodes, job_id=self.ctx.job_id,
                                 timeout_s=self.spec.fault_tolerance.health_timeout,
                                 gpus_per_node=self.spec.gpus_per_node, **extra)
        except (AcmeError, OSError, RuntimeError) as exc:
            self.log(f"{why} health check could not run: {exc}")
            return []
        self.log(f"{why} health check: bad nodes {list(result.bad_nodes) or 'none'}")
        if result.bad_nodes:
            self._record_health(result.bad_nodes, why)
        return list(result.bad_nodes)

    # ------------------------------------------------------------ step
    def _run_step(self, nodes: Sequence[str], resume: Checkpoint | None,
                  skip: str) -> policy.AttemptEnd:
        """Launch one training step from ``resume`` and watch it to its end."""
        self._down_at_term = ()
        self._step_started = time.time()

        def snapshot() -> None:  # in the SIGTERM handler: see Signals
            self._down_at_term = self._down_nodes(nodes, self.after_term)

        self.signals.on_term = snapshot
        try:
            return self._watch_step(nodes, resume, skip)
        finally:
            self.signals.on_term = None

    def _watch_step(self, nodes: Sequence[str], resume: Checkpoint | None,
                    skip: str) -> policy.AttemptEnd:
        launch, proc = self._launch(nodes, resume, skip)
        watch = StepWatch(spec=self.spec, metrics_path=self.ctx.path(AttemptFile.METRICS),
                          log_path=self.ctx.path(AttemptFile.LOG),
                          progress_path=self.ctx.path(AttemptFile.PROGRESS),
                          signals=self.signals,
                          patterns=compile_patterns(self.spec.progress.patterns,
                                                    defaults=self.spec.progress.defaults),
                          poll_s=self.poll_s, log=self.log)
        end = watch.run(launch, proc)
        self.ctx.path(AttemptFile.COMPRESSED_LOG).write_text("\n".join(end.compressed) + "\n",
                                                             encoding="utf-8")
        return end

    def _launch(self, nodes: Sequence[str], resume: Checkpoint | None,
                skip: str) -> tuple[Launch, subprocess.Popen[str]]:
        ctx, spec = self.ctx, self.spec
        master = nodes[0] if nodes else "localhost"
        addr = resolve_address(master, self._node_addr(master)) if nodes else "127.0.0.1"
        port = rendezvous_port(master, here=ctx.here, job_id=ctx.job_id if nodes else "")
        env = training_env(spec, base=self.env, ckpt_dir=self.ckpt_dir,
                           resume_from=resume.path if resume else None,
                           resume_step=resume.step if resume else None, skip_steps=skip,
                           metrics_file=str(ctx.path(AttemptFile.METRICS)), master_addr=addr,
                           port=port, run_id=ctx.run_id, attempt=ctx.attempt)
        command = training_command(spec, nodes or ["localhost"], endpoint=f"{addr}:{port}",
                                   run_id=f"{ctx.run_id}-{ctx.attempt}", env=env)
        per_node = 1 if spec.launch == "torchrun" else spec.ntasks_per_node
        request = step_request(spec, nodes) if nodes else None
        launch = Launch(argv=tuple(command), env=env, nodes=tuple(nodes), tasks_per_node=per_node,
                        task_is_rank=spec.launch == "srun", master_addr=addr, port=port)
        self.log(f"launch ({spec.launch}): {' '.join(command)} (MASTER_ADDR={addr} "
                 f"MASTER_PORT={port})")
        if request is not None:
            proc = start_step(request, command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=step_env(env), text=True,
                              errors="replace", bufsize=1)
        else:  # no allocation (a local run): the command itself, not a Slurm step
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=dict(env), text=True,
                                    errors="replace", bufsize=1)
        return launch, proc

    def _node_addr(self, node: str) -> str | None:
        try:
            return node_addr(node, timeout=self.slurm.timeout)
        except SlurmError:
            return None

    # ---------------------------------------------------------- decide
    def _decide(self, end: policy.AttemptEnd, nodes: Sequence[str],
                budget: policy.Budget, spares: Sequence[str] = ()) -> policy.Decision:
        if end.terminated:
            return self._ended_by_slurm(nodes, end.diagnosis)
        decision = policy.decide(end, budget, spike_skip=self.spec.fault_tolerance.loss_spike.skip)
        if self.spec.fault_tolerance.in_place and decision.requeues and decision.counts_as_restart:
            return self._suspects_checked(decision, nodes, spares)
        if decision.needs_culprit:
            decision = self._with_culprits(decision, nodes)
        return decision

    # ------------------------------------------------------- in place
    def _suspects_checked(self, decision: policy.Decision, nodes: Sequence[str],
                          spares: Sequence[str]) -> policy.Decision:
        """The failed nodes of a restart inside the allocation: those the logs named, and
        those a health check of the suspects finds. The suspects are the named nodes (every
        training node when none was named, for a failure a culprit may explain), each
        paired with a node not suspected -- a spare, or a training node not named -- so
        no full pre-flight check runs again."""
        named = list(dict.fromkeys(decision.exclude))
        suspects = named or (list(nodes) if decision.needs_culprit else [])
        bad: list[str] = []
        note = ""
        if suspects and self.spec.fault_tolerance.health_check == "allgather":
            good = [n for n in (*nodes, *spares) if n not in suspects]
            if good or len(suspects) >= 2:
                bad = self._health(suspects, "suspect", known_good=good)
                note = f"; health check of {','.join(suspects)}: {','.join(bad) or 'all passed'}"
        failed = tuple(dict.fromkeys([*named, *bad]))
        return replace(decision, reason=f"{decision.reason}{note}", exclude=failed,
                       needs_culprit=False)

    def _in_place(self, decision: policy.Decision, end: policy.AttemptEnd,
                  spares: Sequence[str]) -> dict[str, str] | None:
        """Failed node -> the spare that takes its place, when this failure is recovered
        inside the allocation ({} restarts on the same nodes); None: leave the allocation
        (no spares configured, Slurm ended the job, a decision that is not a restart, or
        fewer spares left than failed nodes)."""
        if not self.spec.fault_tolerance.in_place or end.terminated:
            return None
        if not (decision.requeues and decision.counts_as_restart):
            return None
        failed = list(decision.exclude)
        if len(failed) > len(spares):
            self.log(f"{len(failed)} failed node(s) ({','.join(failed)}), {len(spares)} spare(s) "
                     "left: requeue excluding them")
            return None
        return dict(zip(failed, spares, strict=False))

    def _restart_in_place(self, decision: policy.Decision, swap: Mapping[str, str], *,
                          start: float, end: policy.AttemptEnd, nodes: Sequence[str],
                          spares: Sequence[str]) -> tuple[list[str], list[str]]:
        """Record this attempt as restarted in place; the next one's (nodes, spares)."""
        new_nodes = [swap.get(n, n) for n in nodes]
        left = [s for s in spares if s not in swap.values()]
        what = ", ".join(f"{a} -> spare {b}" for a, b in swap.items()) or "on the same nodes"
        restarted = replace(decision, outcome=AttemptOutcome.RESTARTED,
                            reason=f"{decision.reason}; restarted inside the allocation "
                                   f"({what}), no requeue")
        self._record_end(restarted, start=start, end=end, nodes=nodes,
                         extra={"in_place": True, "replaced": dict(swap), "spares_left": left})
        return new_nodes, left

    def _ended_by_slurm(self, nodes: Sequence[str],
                        diagnosis: Diagnosis | None = None) -> policy.Decision:
        """SIGTERM from Slurm: why (scancel, node failure, time limit), from what Slurm says
        while KillWait lasts and from the step's own last lines."""
        state = self._job_state_after_term()
        down = tuple(dict.fromkeys([*self._down_at_term,
                                    *self._down_nodes(nodes, self.after_term)]))
        if not down and state is JobState.NODE_FAIL:
            down = self._went_down(nodes)
        if not down and diagnosis is not None and diagnosis.node in nodes and (
                diagnosis.origin == "infrastructure" and diagnosis.action == "requeue_exclude_node"):
            down = (str(diagnosis.node),)  # e.g. srun's "Node failure on nodeN"
        decision = policy.ended_by_slurm(state, () if state is JobState.CANCELLED else down)
        if decision.outcome is AttemptOutcome.NODE_FAIL and diagnosis is not None \
                and diagnosis.node in decision.exclude:
            decision = replace(decision, diagnosis=diagnosis)
        self.log(f"ended by Slurm: job state {state.value if state else '?'}; "
                 f"down {','.join(down) or '-'}")
        return decision

    def _went_down(self, nodes: Sequence[str]) -> tuple[str, ...]:
        """Those of ``nodes`` with a DOWN event on record since this step started.

        Slurm said NODE_FAIL but no node is down now: with ``ReturnToService=2`` a
        node whose slurmd still answers is back in service within milliseconds of
        being set DOWN, before the SIGTERM handler asks. slurmdbd keeps the event.
        """
        since = datetime.fromtimestamp(self._step_started - 5, tz=timezone.utc)
        try:
            events = (self.after_term or self.slurm).node_events(nodes, since)
        except SlurmError as exc:
            self.log(f"cannot read the nodes' events: {exc}")
            return ()
        return tuple(dict.fromkeys(e.node for e in events if e.down and e.node in nodes))

    def _job_state_after_term(self) -> JobState | None:
        """The job's state as accounting has it: ``scontrol`` only says COMPLETING while the
        job's processes (this one too) exit, while sacct already says CANCELLED."""
        slurm = self.after_term or self.slurm
        since = datetime.fromtimestamp(time.time() - 86400, tz=timezone.utc)
        state = None
        for _ in range(3):
            try:
                jobs = slurm.sacct(since, job_ids=[self.ctx.job_id])
                state = jobs[-1].state if jobs else None
            except SlurmError as exc:
                self.log(f"cannot read the job's state after SIGTERM: {exc}")
            if state is not None and state not in (JobState.RUNNING, JobState.COMPLETING):
                return state
            time.sleep(0.3)
        try:
            return slurm.show_job(self.ctx.job_id).state
        except SlurmError:
            return state

    def _with_culprits(self, decision: policy.Decision, nodes: Sequence[str]) -> policy.Decision:
        bad: list[str] = []
        if self.spec.fault_tolerance.health_check == "allgather" and len(nodes) >= 2:
            bad = self._health(nodes, "culprit")
        reason = (f"{decision.reason}; health check found {','.join(bad)}" if bad
                  else f"{decision.reason}; no culprit found, requeue without exclusion")
        return replace(decision, reason=reason, exclude=tuple(bad), needs_culprit=False)

    # ---------------------------------------------------------- finish
    def _finish(self, decision: policy.Decision, *, start: float,
                history: Sequence[run_store.AttemptRow], end: policy.AttemptEnd | None,
                nodes: Sequence[str]) -> int:
        ctx = self.ctx
        exclude = sorted(set(decision.exclude))
        if decision.requeues and exclude:
            decision = self._check_room(decision, exclude, history)
        self._record_end(decision, start=start, end=end, nodes=nodes)
        all_excluded = sorted(set(exclude) | self._carried_exclusions(history))
        helper_log = str(Path(ctx.run_dir) / REQUEUE_HELPER_LOG)
        if decision.outcome in (AttemptOutcome.KILLED, AttemptOutcome.NODE_FAIL):
            # Slurm requeues the job itself; the helper skips the requeue delay and keeps
            # the failed nodes out of the next allocation.
            self.spawn(ctx.job_id, exclude=all_excluded, mode="watch", log_path=helper_log)
        if not decision.requeues:
            return decision.exit_code
        self.signals.requeue_pending = True
        shrink = {"resize": self._resize(decision.num_nodes)} if decision.num_nodes else {}
        self.spawn(ctx.job_id, exclude=all_excluded, mode="requeue", log_path=helper_log,
                   **shrink)
        deadline = time.time() + self.requeue_wait_s
        while time.time() < deadline and not self.signals.term:
            time.sleep(self.poll_s)
        if not self.signals.term and self.requeue_wait_s > 0:
            run_store.update_run(self.store, ctx.run_id, state=RunState.STOPPED.value,
                                 reason=f"{decision.reason}; but the job was not requeued within "
                                 f"{self.requeue_wait_s:g}s (see {helper_log})")
        return decision.exit_code

    def _resize(self, nodes: int) -> tuple[int, int, int]:
        """(nodes, tasks, CPUs) of the job at ``nodes`` nodes, as sbatch derived them."""
        tasks = nodes * self.spec.ntasks_per_node
        return nodes, tasks, tasks * (self.spec.cpus_per_task or 1)

    def _record_end(self, decision: policy.Decision, *, start: float,
                    end: policy.AttemptEnd | None, nodes: Sequence[str],
                    extra: Mapping[str, object] | None = None) -> None:
        """Record how this attempt ended and what was decided, before acting on it."""
        ctx = self.ctx
        now = time.time()
        exclude = sorted(set(decision.exclude))
        on_disk = self._sync_checkpoints()
        failure_id = None
        if decision.diagnosis is not None and decision.outcome not in (
                AttemptOutcome.COMPLETED, AttemptOutcome.TIME_LIMIT, AttemptOutcome.CANCELLED):
            failure_id = self._record_failure(
                decision.diagnosis, job_id=ctx.job_id, attempt=ctx.attempt, ts=now, since=start,
                gpus=self.spec.gpus_per_node * len(nodes), log_path=str(ctx.path(AttemptFile.LOG)))
        saved = max([c.created_ts for c in on_disk if c.created_ts >= start]
                    + [end.last_ckpt_ts or 0.0 if end else 0.0, start])
        lost = 0.0 if decision.outcome is AttemptOutcome.COMPLETED else now - saved
        restarts = decision.requeues or decision.outcome is AttemptOutcome.RESTARTED
        detail: dict[str, object] = {"reason": decision.reason,
                                     "counts_as_restart": restarts and decision.counts_as_restart,
                                     **(extra or {})}
        if decision.unknown:
            detail["unknown"] = True
        if decision.rollback_before is not None:
            detail["rollback_before"] = decision.rollback_before
        if decision.add_skip:
            detail["add_skip"] = policy.merge_skips(decision.add_skip)
        if end is not None and end.hang is not None:
            detail["hang_detected_after_s"] = end.hang.quiet_s
            detail["hang_limit"] = end.hang.limit_name
        if self.spec.fault_tolerance.in_place:
            detail["allocated_nodes"] = self.spec.allocated_nodes
        carries = restarts or decision.outcome is AttemptOutcome.NODE_FAIL
        run_store.end_attempt(self.store, run_id=ctx.run_id, attempt=ctx.attempt,
                              job_id=ctx.job_id, end_ts=now, outcome=decision.outcome.value,
                              exit_code=end.exit_code if end else None,
                              excluded=exclude if carries else [],
                              last_step=end.last_step if end else None, time_lost_s=lost,
                              failure_id=failure_id, detail=detail)
        run_store.update_run(self.store, ctx.run_id, state=decision.outcome.run_state().value,
                             reason=decision.reason)
        self.log(f"decision: {decision.outcome.value}: {decision.reason}")

    def _record_failure(self, diagnosis: Diagnosis | None, *, job_id: str, attempt: int,
                        ts: float, since: float, gpus: int | None, log_path: str | None
                        ) -> int | None:
        if diagnosis is None:
            return None
        return failure_store.record_failure(
            self.store, diagnosis, cluster=self.ctx.cluster, job_id=job_id,
            run_id=self.ctx.run_id, attempt=attempt, ts=ts, gpus=gpus,
            time_to_failure_s=ts - since, log_path=log_path)

    def _sync_checkpoints(self) -> list[Checkpoint]:
        """Record the checkpoints on disk now; forget those retention deleted."""
        on_disk = self._on_disk()
        run_store.sync_checkpoints(self.store, run_id=self.ctx.run_id, job_id=self.ctx.job_id,
                                   present=[(c.step, c.path, c.size, c.checksum,
                                             c.created_ts or time.time()) for c in on_disk])
        return on_disk

    def _check_room(self, decision: policy.Decision, exclude: list[str],
                    history: Sequence[run_store.AttemptRow]) -> policy.Decision:
        """Stop rather than requeue into a queue the job can never leave."""
        try:
            names = {n.name for n in self.slurm.sinfo_nodes()}
        except SlurmError:
            return decision
        excluded = set(exclude) | self._carried_exclusions(history)
        left = len(names - excluded)
        if left < self.spec.nodes:
            return policy.Decision(AttemptOutcome.STOP, f"{decision.reason}; but only "
                                   f"{left} nodes are left after excluding "
                                   f"{','.join(sorted(excluded))}", diagnosis=decision.diagnosis)
        if left < self.spec.allocated_nodes:  # fewer spares than asked for, not a job stuck
            return replace(decision, num_nodes=left, reason=f"{decision.reason}; {left} nodes "
                           f"left: the requeued job asks for {left} "
                           f"({left - self.spec.nodes} spare(s))")
        return decision
