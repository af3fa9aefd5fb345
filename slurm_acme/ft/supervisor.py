"""``sacme supervise``: the in-job supervisor that the batch script execs.

One attempt, start to end: record it, learn what the previous attempt left,
health-check the allocation, launch the trainer with srun, watch its output
(diagnoser) and its metrics file (heartbeat), then decide -- complete,
requeue excluding culprits, roll back past a loss spike, or stop -- and
record the decision before acting on it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_acme import exitcodes
from slurm_acme.contracts import REQUEUE_HELPER_LOG, AttemptFile, attempt_file
from slurm_acme.errors import AcmeError, InputError
from slurm_acme.ft import policy
from slurm_acme.ft.deps import (
    Checkpoint,
    Finding,
    HealthResult,
    LogWatcher,
    health_check,
    healthy_checkpoints,
    make_watcher,
)
from slurm_acme.ft.launch import (
    Launch,
    master_port,
    node_addr,
    resolve_address,
    srun_argv,
    step_request,
    training_env,
)
from slurm_acme.ft.metrics import MetricsTail
from slurm_acme.ft.requeue import spawn_detached
from slurm_acme.ft.spec import TrainSpec
from slurm_acme.slurm import Slurm, SlurmError, start_step
from slurm_acme.store import Store
from slurm_acme.store import runs as run_store

_LABEL = re.compile(r"^\s*(\d+):\s?(.*)$")
#: Outcomes of earlier attempts that count against ``max_restarts``.
_RESTARTS = {policy.REQUEUE, policy.ROLLBACK, policy.NODE_FAIL, policy.LOST, "killed"}


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

    @classmethod
    def from_env(cls, run_id: str, env: Mapping[str, str], run_dir: str,
                 workdir: str) -> JobContext:
        job_id = env.get("SLURM_JOB_ID")
        if not job_id:
            raise InputError("sacme supervise runs inside a Slurm batch job (no SLURM_JOB_ID)")
        return cls(run_id=run_id, job_id=job_id, attempt=int(env.get("SLURM_RESTART_COUNT") or 0),
                   nodelist=env.get("SLURM_JOB_NODELIST", ""),
                   cluster=env.get("SLURM_CLUSTER_NAME", ""), run_dir=run_dir,
                   workdir=workdir)

    def path(self, kind: AttemptFile) -> Path:
        return attempt_file(self.run_dir, self.attempt, self.job_id, kind)


@dataclass
class Signals:
    """Flags set by signal handlers and read by the watch loop."""

    usr2: bool = False
    term: bool = False
    requeue_pending: bool = False

    def install(self) -> None:
        signal.signal(signal.SIGUSR2, self._on_usr2)
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_usr2(self, *_: object) -> None:
        self.usr2 = True

    def _on_term(self, *_: object) -> None:
        self.term = True


@dataclass
class Supervisor:
    store: Store
    slurm: Slurm
    spec: TrainSpec
    ctx: JobContext
    watcher_factory: Callable[[Sequence[str]], LogWatcher] = make_watcher
    health: Callable[..., HealthResult] = health_check
    checkpoints: Callable[[str], list[Checkpoint]] = healthy_checkpoints
    spawn: Callable[..., None] = spawn_detached
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    signals: Signals = field(default_factory=Signals)
    poll_s: float = 0.5
    log: Callable[[str], None] = print
    ckpt_dir: str = ""
    #: How long to wait for the requeue helper to end this job before exiting anyway.
    requeue_wait_s: float = 120.0
    detected_after_s: float | None = None

    # ------------------------------------------------------------ run
    def run(self) -> int:
        ctx = self.ctx
        Path(ctx.run_dir).mkdir(parents=True, exist_ok=True)
        nodes = self.slurm.show_hostnames(ctx.nodelist) if ctx.nodelist else []
        history = self._history()
        restarts_used = sum(1 for a in history if a.outcome in _RESTARTS)
        skip = policy.merge_skips(*(policy.parse_skips(a.details.get("add_skip")) for a in history))
        rollbacks = [(a.end_ts or 0.0, int(a.details["rollback_before"]))
                     for a in history if a.details.get("rollback_before") is not None]
        self.ckpt_dir = str(Path(ctx.workdir) / Path(self.spec.checkpoint.dir).expanduser())
        resume = policy.resume_point(self.checkpoints(self.ckpt_dir), rollbacks)
        start = self._record_start(nodes, history, resume, skip)
        self.signals.install()

        preflight = self._preflight(nodes, restarts_used)
        if preflight is not None:
            return self._finish(preflight, start=start, history=history, last_step=None,
                                last_ckpt_ts=None, exit_code=None, nodes=nodes)
        launch = self._launch(nodes, self.ckpt_dir, resume, skip)
        end, last_step, last_ckpt_ts = self._watch(launch, start)
        if self.signals.term and not self.signals.requeue_pending:
            return self._killed(start, last_step, last_ckpt_ts)
        decision = policy.decide(end, restarts_used=restarts_used,
                                 max_restarts=self.spec.fault_tolerance.max_restarts,
                                 spike_skip=self.spec.fault_tolerance.loss_spike.skip,
                                 hang_timeout=self.spec.fault_tolerance.hang_timeout)
        if decision.needs_culprit:
            decision = self._with_culprits(decision, nodes)
        return self._finish(decision, start=start, history=history, last_step=last_step,
                            last_ckpt_ts=last_ckpt_ts, exit_code=end.exit_code, nodes=nodes)

    # -------------------------------------------------------- previous
    def _history(self) -> list[run_store.AttemptRow]:
        """Earlier attempts of this run; one that left no decision is closed first."""
        ctx = self.ctx

        def earlier() -> list[run_store.AttemptRow]:
            return [a for a in run_store.list_attempts(self.store, ctx.run_id)
                    if (a.attempt, a.job_id) != (ctx.attempt, ctx.job_id)]

        history = earlier()
        if history and (history[-1].end_ts is None or history[-1].outcome == "killed"):
            self._close_lost(history[-1])
            history = earlier()
        if history:
            prev = history[-1]
            self.log(f"previous attempt {prev.attempt} (job {prev.job_id}) on {prev.nodelist}: "
                     f"{prev.outcome}: {prev.details.get('reason', '-')}")
        return history

    def _record_start(self, nodes: Sequence[str], history: Sequence[run_store.AttemptRow],
                      resume: Checkpoint | None, skip: str) -> float:
        ctx = self.ctx
        start = time.time()
        run_store.start_attempt(self.store, run_id=ctx.run_id, attempt=ctx.attempt,
                                job_id=ctx.job_id, nodelist=",".join(nodes), start_ts=start,
                                resumed_from_step=resume.step if resume else None,
                                resumed_from=resume.path if resume else None, skip_steps=skip)
        run_store.update_run(self.store, ctx.run_id, state="RUNNING", last_job_id=ctx.job_id)
        if history and history[-1].failure_id:
            run_store.set_failure_recovery(self.store, history[-1].failure_id,
                                           start - (history[-1].end_ts or start))
        self.log(f"attempt {ctx.attempt} of run {ctx.run_id} (job {ctx.job_id}) on "
                 f"{','.join(nodes)}; resume from {resume.path if resume else 'scratch'}; "
                 f"skip {skip or '-'}")
        return start

    def _close_lost(self, prev: run_store.AttemptRow) -> None:
        """The previous attempt ended without a decision: NODE_FAIL or a kill."""
        down: list[str] = []
        try:
            states = {n.name: n for n in self.slurm.sinfo_nodes()}
            for node in (prev.nodelist or "").split(","):
                info = states.get(node)
                if info is not None and (not info.responding or info.state.startswith(
                        ("down", "drain", "fail"))):
                    down.append(node)
        except SlurmError as exc:
            self.log(f"cannot read node states: {exc}")
        outcome = policy.NODE_FAIL if down else policy.LOST
        failure_id = prev.failure_id
        if down and failure_id is None:
            failure_id = run_store.record_failure(
                self.store, cluster=self.ctx.cluster, job_id=prev.job_id, run_id=prev.run_id,
                attempt=prev.attempt, ts=prev.end_ts or time.time(), category="NodeFailure",
                origin="infrastructure", action="requeue_exclude_node", node=down[0],
                rule_id=None, confidence=1.0,
                evidence=[f"{n}: not responding or down in sinfo" for n in down],
                source="slurm", gpus=None,
                time_to_failure_s=(prev.end_ts or time.time()) - prev.start_ts, log_path=None)
        detail = {**prev.details, "reason": (f"node(s) {','.join(down)} failed (NODE_FAIL); "
                                             "Slurm requeued the job") if down else
                  "ended without a decision (killed); Slurm requeued the job"}
        run_store.end_attempt(self.store, run_id=prev.run_id, attempt=prev.attempt,
                              job_id=prev.job_id, end_ts=prev.end_ts or time.time(),
                              outcome=outcome, exit_code=prev.exit_code, excluded=down,
                              last_step=prev.last_step, time_lost_s=prev.time_lost_s,
                              failure_id=failure_id, detail=detail)

    def _preflight(self, nodes: Sequence[str], restarts_used: int) -> policy.Decision | None:
        """The pre-flight allgather check; a decision only when it found bad nodes."""
        if self.spec.fault_tolerance.health_check != "allgather" or len(nodes) < 2:
            return None
        bad = self._health(nodes, "pre-flight")
        if not bad:
            return None
        finding = Finding(category="health_check", origin="infrastructure",
                          action="requeue_exclude_node", node=bad[0],
                          evidence=(f"pre-flight allgather failed on {','.join(bad)}",),
                          source="health")
        decision = policy.decide(policy.AttemptEnd(exit_code=None, finding=finding),
                                 restarts_used=restarts_used,
                                 max_restarts=self.spec.fault_tolerance.max_restarts)
        if not decision.requeues:
            return decision
        return policy.Decision(policy.REQUEUE, f"pre-flight health check: bad node(s) "
                               f"{','.join(bad)}", exclude=tuple(bad), finding=finding)

    # ---------------------------------------------------------- health
    def _health(self, nodes: Sequence[str], why: str) -> list[str]:
        self.log(f"{why} health check on {','.join(nodes)}")
        try:
            result = self.health(nodes, job_id=self.ctx.job_id,
                                 timeout_s=self.spec.fault_tolerance.health_timeout,
                                 gpus_per_node=self.spec.gpus_per_node)
        except (AcmeError, OSError, RuntimeError) as exc:
            self.log(f"{why} health check could not run: {exc}")
            return []
        self.log(f"{why} health check: bad nodes {list(result.bad_nodes) or 'none'}")
        return list(result.bad_nodes)

    def _with_culprits(self, decision: policy.Decision, nodes: Sequence[str]) -> policy.Decision:
        bad: list[str] = []
        if self.spec.fault_tolerance.health_check == "allgather" and len(nodes) >= 2:
            bad = self._health(nodes, "culprit")
        reason = (f"{decision.reason}; health check found {','.join(bad)}" if bad
                  else f"{decision.reason}; no culprit found, requeue without exclusion")
        return policy.Decision(decision.outcome, reason, exclude=tuple(bad),
                               finding=decision.finding)

    # ---------------------------------------------------------- launch
    def _launch(self, nodes: Sequence[str], ckpt_dir: str, resume: Checkpoint | None,
                skip: str) -> tuple[Launch, subprocess.Popen[str]]:
        ctx = self.ctx
        first = nodes[0] if nodes else "localhost"
        addr = resolve_address(first, self._node_addr(first))
        port = master_port(ctx.job_id, ctx.attempt)
        env = training_env(self.spec, base=self.env, ckpt_dir=ckpt_dir,
                           resume_from=resume.path if resume else None, skip_steps=skip,
                           metrics_file=str(ctx.path(AttemptFile.METRICS)), master_addr=addr,
                           port=port, run_id=ctx.run_id, attempt=ctx.attempt)
        argv = srun_argv(self.spec, nodes) if nodes else tuple(self.spec.argv)
        launch = Launch(argv=argv, env=env, nodes=tuple(nodes),
                        ntasks_per_node=self.spec.ntasks_per_node)
        self.log(f"launch: {' '.join(argv)} (MASTER_ADDR={addr} MASTER_PORT={port})")
        if nodes:
            proc = start_step(step_request(self.spec, nodes), self.spec.argv,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=env, text=True,
                              errors="replace", bufsize=1)
        else:  # no allocation (a local run): the command itself, not a Slurm step
            proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=dict(env), text=True,
                                    errors="replace", bufsize=1)
        return launch, proc

    def _node_addr(self, node: str) -> str | None:
        try:
            return node_addr(node, timeout=self.slurm.timeout)
        except SlurmError:
            return None

    # ----------------------------------------------------------- watch
    def _watch(self, launched: tuple[Launch, subprocess.Popen[str]],
               start: float) -> tuple[policy.AttemptEnd, int | None, float | None]:
        launch, proc = launched
        watcher = self.watcher_factory(self.spec.diagnosis.rules)
        lock = threading.Lock()
        log_file = self.ctx.path(AttemptFile.LOG).open("a", encoding="utf-8")
        reader = threading.Thread(target=_pump, args=(proc, launch, watcher, lock, log_file),
                                  daemon=True)
        reader.start()
        metrics = MetricsTail(self.ctx.path(AttemptFile.METRICS))
        hang_timeout = self.spec.fault_tolerance.hang_timeout
        startup_timeout = self.spec.fault_tolerance.startup_timeout
        launched_at = time.time()
        hung = forwarded = False
        last_ckpt_ts = None
        while proc.poll() is None:
            time.sleep(self.poll_s)
            before = len(metrics.checkpoints)
            metrics.poll()
            if len(metrics.checkpoints) > before:
                last_ckpt_ts = time.time()
            if self.signals.usr2 and not forwarded:
                self.log("time-limit signal: asking the trainer to checkpoint")
                proc.send_signal(signal.SIGUSR2)
                forwarded = True
            if self.signals.term:
                _stop(proc)
                break
            progress = metrics.last_progress_ts or launched_at
            limit = hang_timeout if metrics.last_progress_ts else startup_timeout
            if time.time() - progress > limit and not metrics.done:
                self.log(f"hang: no new step for {limit:g}s (last step {metrics.last_step})")
                self.detected_after_s = round(time.time() - progress, 2)
                hung = True
                _stop(proc)
                break
        rc = proc.wait()
        reader.join(timeout=10)
        log_file.close()
        metrics.poll()
        with lock:
            finding = None if rc == 0 and not hung else watcher.finding()
            compressed = watcher.compressed_lines()
        self.ctx.path(AttemptFile.COMPRESSED_LOG).write_text("\n".join(compressed) + "\n", encoding="utf-8")
        end = policy.AttemptEnd(exit_code=rc, finding=finding, hung=hung,
                                time_limit_signal=self.signals.usr2,
                                spike_step=metrics.spike_step if rc != 0 else None,
                                done=metrics.done,
                                checkpointed_for_requeue=metrics.checkpointed_for_requeue)
        self.log(f"trainer exited {rc}; hung={hung}; diagnosis="
                 f"{finding.category + '/' + finding.origin if finding else '-'}")
        return end, metrics.last_step, last_ckpt_ts

    # ---------------------------------------------------------- finish
    def _finish(self, decision: policy.Decision, *, start: float,
                history: Sequence[run_store.AttemptRow], last_step: int | None,
                last_ckpt_ts: float | None, exit_code: int | None, nodes: Sequence[str]) -> int:
        ctx = self.ctx
        now = time.time()
        exclude = sorted(set(decision.exclude))
        if decision.requeues and exclude:
            decision = self._check_room(decision, exclude, history)
        self._record_checkpoints()
        failure_id = None
        if decision.finding is not None and decision.outcome != policy.COMPLETED:
            f = decision.finding
            failure_id = run_store.record_failure(
                self.store, cluster=ctx.cluster, job_id=ctx.job_id, run_id=ctx.run_id,
                attempt=ctx.attempt, ts=now, category=f.category, origin=f.origin,
                action=f.action, node=f.node, rule_id=f.rule_id, confidence=f.confidence,
                evidence=list(f.evidence), source=f.source,
                gpus=self.spec.gpus_per_node * len(nodes), time_to_failure_s=now - start,
                log_path=str(ctx.path(AttemptFile.LOG)))
        lost = 0.0 if decision.outcome == policy.COMPLETED else now - (last_ckpt_ts or start)
        detail: dict[str, object] = {"reason": decision.reason}
        if decision.rollback_before is not None:
            detail["rollback_before"] = decision.rollback_before
        if decision.add_skip:
            detail["add_skip"] = policy.merge_skips(decision.add_skip)
        if self.detected_after_s is not None:
            detail["hang_detected_after_s"] = self.detected_after_s
        run_store.end_attempt(self.store, run_id=ctx.run_id, attempt=ctx.attempt,
                              job_id=ctx.job_id, end_ts=now, outcome=decision.outcome,
                              exit_code=exit_code, excluded=exclude if decision.requeues else [],
                              last_step=last_step, time_lost_s=lost, failure_id=failure_id,
                              detail=detail)
        state = {policy.COMPLETED: "COMPLETED", policy.STOP: "STOPPED"}.get(
            decision.outcome, "REQUEUED")
        run_store.update_run(self.store, ctx.run_id, state=state, reason=decision.reason)
        self.log(f"decision: {decision.outcome}: {decision.reason}")
        if not decision.requeues:
            return decision.exit_code
        all_excluded = sorted(set(exclude) | {n for a in history for n in a.excluded
                                              if a.outcome != policy.NODE_FAIL}
                              | set(self.spec.fault_tolerance.exclude))
        self.signals.requeue_pending = True
        self.spawn(ctx.job_id, exclude=all_excluded, mode="requeue",
                   log_path=str(Path(ctx.run_dir) / REQUEUE_HELPER_LOG))
        deadline = time.time() + self.requeue_wait_s
        while time.time() < deadline and not self.signals.term:
            time.sleep(self.poll_s)
        if not self.signals.term and self.requeue_wait_s > 0:
            run_store.update_run(self.store, ctx.run_id, state="STOPPED",
                                 reason=f"{decision.reason}; but the job was not requeued within "
                                 f"{self.requeue_wait_s:g}s (see {ctx.run_dir}/{REQUEUE_HELPER_LOG})")
        return decision.exit_code

    def _record_checkpoints(self) -> None:
        try:
            healthy = self.checkpoints(self.ckpt_dir)
        except (OSError, ValueError) as exc:
            self.log(f"cannot list checkpoints in {self.ckpt_dir}: {exc}")
            return
        for ck in healthy:
            run_store.record_checkpoint(self.store, run_id=self.ctx.run_id, job_id=self.ctx.job_id,
                                        step=ck.step, path=ck.path, size=ck.size,
                                        checksum=ck.checksum, healthy=True,
                                        created_ts=ck.created_ts or time.time())

    def _check_room(self, decision: policy.Decision, exclude: list[str],
                    history: Sequence[run_store.AttemptRow]) -> policy.Decision:
        """Stop rather than requeue into a queue the job can never leave."""
        try:
            names = {n.name for n in self.slurm.sinfo_nodes()}
        except SlurmError:
            return decision
        excluded = set(exclude) | {n for a in history for n in a.excluded} \
            | set(self.spec.fault_tolerance.exclude)
        if len(names - excluded) < self.spec.nodes:
            return policy.Decision(policy.STOP, f"{decision.reason}; but only "
                                   f"{len(names - excluded)} nodes are left after excluding "
                                   f"{','.join(sorted(excluded))}", finding=decision.finding)
        return decision

    def _killed(self, start: float, last_step: int | None, last_ckpt_ts: float | None) -> int:
        """Slurm is ending the job (NODE_FAIL requeue, scancel): record, hurry a requeue."""
        ctx = self.ctx
        now = time.time()
        run_store.end_attempt(self.store, run_id=ctx.run_id, attempt=ctx.attempt,
                              job_id=ctx.job_id, end_ts=now, outcome="killed", exit_code=None,
                              last_step=last_step, time_lost_s=now - (last_ckpt_ts or start),
                              detail={"reason": "killed by Slurm (SIGTERM)"})
        self.spawn(ctx.job_id, exclude=[], mode="watch",
                   log_path=str(Path(ctx.run_dir) / REQUEUE_HELPER_LOG))
        return 128 + signal.SIGTERM


def _pump(proc: subprocess.Popen[str], launch: Launch, watcher: LogWatcher,
          lock: threading.Lock, log_file) -> None:  # type: ignore[no-untyped-def]
    """Copy srun's labelled output to the attempt log and into the diagnoser."""
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.rstrip("\n")
        log_file.write(line + "\n")
        log_file.flush()
        match = _LABEL.match(line)
        rank = int(match.group(1)) if match else None
        text = match.group(2) if match else line
        with lock:
            watcher.feed(text, rank=rank, node=launch.node_of_rank(rank))


def _stop(proc: subprocess.Popen[str], grace: float = 10.0) -> None:
    """Stop the step: SIGTERM (srun forwards it), then SIGKILL after ``grace``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()


def exit_code_for(outcome: str) -> int:
    return {policy.COMPLETED: exitcodes.OK, policy.STOP: exitcodes.SUPERVISOR_STOP}.get(
        outcome, exitcodes.SUPERVISOR_REQUEUE)
