"""Loss-spike guard: NaN/Inf and spike detection against an EMA, agreed across ranks.

Each rank judges its own loss (NaN/Inf, or above ``ratio`` x the exponential
moving average once ``warmup`` steps have been seen); the verdicts are combined
with an all-reduce MAX (an OR), so every rank takes the same decision in the
same step. A bad step is written to the metrics file with its step number and
the process exits ``TRAIN_ROLLBACK``; the supervisor restarts from the last
healthy checkpoint with that step in ``ACME_SKIP_STEPS``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, NoReturn

from slurm_acme import exitcodes
from slurm_acme.ckpt import collective
from slurm_acme.ckpt.metrics import MetricsWriter
from slurm_acme.contracts import MetricEvent


class Verdict(enum.IntEnum):
    """What the loss-spike guard concluded about one step. An IntEnum so the
    ranks can agree on the worst verdict with one all-reduce (max)."""

    OK = 0
    SPIKE = 1
    NAN = 2

    @property
    def event(self) -> MetricEvent:
        return {Verdict.OK: MetricEvent.STEP, Verdict.SPIKE: MetricEvent.SPIKE,
                Verdict.NAN: MetricEvent.NAN}[self]


@dataclass(frozen=True)
class Decision:
    """The agreed verdict for a step and the agreed values of any extra flags."""

    step: int
    verdict: Verdict
    flags: tuple[int, ...] = ()

    @property
    def rollback(self) -> bool:
        return self.verdict is not Verdict.OK


class LossSpikeGuard:
    """Stops a step whose loss is NaN/Inf or spikes, on every rank at once, so the
    supervisor can roll back to the last healthy checkpoint and skip the bad batch.

    Call :meth:`check` once per step with the step's loss, before ``backward()``; it
    also writes the ``step`` (or ``spike``/``nan``) line to the metrics file, which is
    the supervisor's heartbeat. If ``decision.rollback``, call :meth:`rollback`.

    Args:
        metrics: where steps and verdicts are written (``MetricsWriter.from_env(rank)``).
        ratio: a loss above ``ratio`` x the moving average is a spike (``$ACME_SPIKE_RATIO``
            is the spec's value; pass it on if you want the train.yaml to decide).
        warmup: steps seen before spikes are judged (early losses fall fast).
        ema_beta: weight of the past in the moving average.

    Its :meth:`state_dict` is per rank (each rank's own losses): save it in
    ``rank_state``.
    """

    def __init__(self, metrics: MetricsWriter, *, ratio: float = 3.0, warmup: int = 5,
                 ema_beta: float = 0.9) -> None:
        if ratio <= 1.0:
            raise ValueError(f"spike ratio={ratio} must be > 1")
        if not 0.0 < ema_beta < 1.0:
            raise ValueError(f"ema_beta={ema_beta} must be in (0, 1)")
        if warmup < 0:
            raise ValueError(f"warmup={warmup} must be >= 0")
        self.metrics = metrics
        self.ratio, self.warmup, self.ema_beta = ratio, warmup, ema_beta
        self.ema: float | None = None
        self.seen = 0

    def local_verdict(self, loss: float) -> Verdict:
        """This rank's judgement of a loss, without changing the guard's state."""
        if not math.isfinite(loss):
            return Verdict.NAN
        if self.ema is not None and self.seen >= self.warmup and loss > self.ratio * self.ema:
            return Verdict.SPIKE
        return Verdict.OK

    def check(self, step: int, loss: float, flags: tuple[int, ...] = (), **fields: Any
              ) -> Decision:
        """Judge `loss`, agree with the other ranks, record the step; `flags` (e.g. a
        stop request) are OR-ed across ranks in the same collective."""
        agreed = collective.all_reduce_max([int(self.local_verdict(loss)), *flags])
        verdict = Verdict(agreed[0])
        if verdict is Verdict.OK:
            self.ema = loss if self.ema is None else (
                self.ema_beta * self.ema + (1 - self.ema_beta) * loss)
            self.seen += 1
            self.metrics.write(MetricEvent.STEP, step, loss, **fields)
        else:
            self.metrics.write(verdict.event, step, loss, ema=self.ema, ratio=self.ratio,
                               **fields)
        return Decision(step, verdict, tuple(agreed[1:]))

    def rollback(self, decision: Decision) -> NoReturn:
        """Exit with TRAIN_ROLLBACK (the event naming the step is already written)."""
        self.metrics.close()
        raise SystemExit(exitcodes.TRAIN_ROLLBACK)

    def state_dict(self) -> dict[str, Any]:
        return {"ema": self.ema, "seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ema = state["ema"]
        self.seen = int(state["seen"])
