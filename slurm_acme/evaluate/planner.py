"""The planner: a pure function from datasets, priors and resources to a plan.

1. Split datasets into contiguous example ranges so that no shard exceeds the
   cap (total GPU seconds / GPU slots, or finer), by GPU time or scoring time.
2. Merge small whole datasets into one trial so the per-trial cost (engine
   start, loading the model from node-local memory) is paid fewer times.
   CPU-heavy and light datasets are not mixed.
3. Place trials with long CPU verification first; then either longest-first
   onto the least-loaded GPU slot (LPT), or McNaughton's wrap-around, which
   fills every slot to total/slots by cutting shards at slot boundaries.
4. Predict the timeline (preload, GPU slots, a FIFO pool of CPU slots for
   scoring) and keep the candidate with the smallest predicted makespan.

Nothing here does I/O; the same inputs and seed always give the same plan.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from slurm_acme.errors import InputError
from slurm_acme.evaluate.packing import first_fit_decreasing
from slurm_acme.evaluate.priors import Prior
from slurm_acme.evaluate.registry import Dataset

GRANULARITIES = (1, 2, 3, 4, 6, 8)
#: A dataset whose scoring wall time is at least this share of its GPU time counts as
#: "long CPU verification" (besides those the registry marks CPU-heavy) and goes first.
LONG_SCORING_RATIO = 0.1


@dataclass(frozen=True)
class Resources:
    """What the plan may use and what using it costs."""

    nodes: int = 1
    gpus_per_node: int = 8
    cpu_slots: int = 32  # CPUs for scoring across the cluster
    cpus_per_score_task: int = 4  # a scoring task parallelises over examples
    trial_overhead_s: float = 12.0  # engine start + load from node-local memory
    preload_s: float = 5.0  # copy checkpoint remote -> node-local memory, once per node
    remote_load_s: float = 36.0  # baseline: load from remote storage (NIC shared)

    def __post_init__(self) -> None:
        for name in ("nodes", "gpus_per_node", "cpu_slots", "cpus_per_score_task"):
            if getattr(self, name) < 1:
                raise InputError(f"resources: {name} must be >= 1 (got {getattr(self, name)})")

    @property
    def gpu_slots(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def score_lanes(self) -> int:
        return max(1, self.cpu_slots // self.cpus_per_score_task)


@dataclass(frozen=True)
class Shard:
    """Examples ``[start, stop)`` of one dataset."""

    dataset: str
    index: int
    count: int
    start: int
    stop: int
    gpu_s: float
    cpu_s: float
    cpu_heavy: bool

    @property
    def key(self) -> str:
        return self.dataset if self.count == 1 else f"{self.dataset}#{self.index}of{self.count}"


@dataclass(frozen=True)
class Trial:
    """One GPU job: loads the model once and runs its shards in order."""

    trial_id: str
    shards: tuple[Shard, ...]
    gpu_s: float  # shards' GPU seconds + the per-trial overhead
    cpu_s: float
    node: int = 0
    slot: int = 0  # GPU index within the node
    start_s: float = 0.0
    end_s: float = 0.0
    score_start_s: float = 0.0
    score_end_s: float = 0.0

    @property
    def cpu_heavy(self) -> bool:
        return any(s.cpu_heavy for s in self.shards)


@dataclass(frozen=True)
class Plan:
    """A complete trial-coordinator plan and its predictions (seconds from submission)."""

    resources: Resources
    trials: tuple[Trial, ...]
    granularity: int
    method: str  # "lpt" or "wrap"
    total_gpu_s: float  # sum of the datasets' GPU priors, no overheads
    shard_cap_s: float
    lower_bound_s: float
    predicted_makespan_s: float
    gpu_end_s: float
    baseline_makespan_s: float
    seed: int = 0
    datasets: tuple[str, ...] = field(default=())

    @property
    def gap(self) -> float:
        """How far the predicted makespan is above the lower bound (0.05 = 5 %)."""
        return self.predicted_makespan_s / self.lower_bound_s - 1.0 if self.lower_bound_s else 0.0

    @property
    def shards(self) -> list[Shard]:
        return [s for t in self.trials for s in t.shards]

    def slot_trials(self) -> dict[tuple[int, int], list[Trial]]:
        slots: dict[tuple[int, int], list[Trial]] = {}
        for trial in sorted(self.trials, key=lambda t: (t.node, t.slot, t.start_s)):
            slots.setdefault((trial.node, trial.slot), []).append(trial)
        return slots

    def node_trials(self, node: int) -> list[Trial]:
        """A node's trials in planned start order (the order its GPU array runs them)."""
        return sorted((t for t in self.trials if t.node == node), key=lambda t: (t.start_s, t.slot))


# ------------------------------------------------------------------ sharding

def split_dataset(ds: Dataset, prior: Prior, cap_s: float, cpus_per_task: int = 1) -> list[Shard]:
    """Contiguous, balanced example ranges, each at most ``cap_s`` GPU seconds and at
    most ``cap_s`` of scoring time (CPU seconds over the CPUs of a scoring task)."""
    heavy = ds.cpu_heavy != "no" or prior.cpu_s / cpus_per_task >= LONG_SCORING_RATIO * prior.gpu_s
    need = max(prior.gpu_s, prior.cpu_s / cpus_per_task)
    count = 1
    if cap_s > 0 and need > cap_s:
        per_example = need / ds.num_examples
        most = max(1, math.floor(cap_s / per_example + 1e-9))  # examples that fit under the cap
        count = min(ds.num_examples, math.ceil(ds.num_examples / most))
    shards = []
    for i in range(count):
        start = ds.num_examples * i // count
        stop = ds.num_examples * (i + 1) // count
        frac = (stop - start) / ds.num_examples if ds.num_examples else 1.0
        shards.append(Shard(ds.name, i, count, start, stop, prior.gpu_s * frac, prior.cpu_s * frac, heavy))
    return shards


def merge_small(shards: Sequence[Shard], cap_s: float, small_s: float) -> list[list[Shard]]:
    """Group whole small datasets (first-fit decreasing up to ``cap_s``); others stay alone."""
    groups: list[list[Shard]] = []
    small = [s for s in shards if s.count == 1 and s.gpu_s < small_s]
    for shard in shards:
        if not (shard.count == 1 and shard.gpu_s < small_s):
            groups.append([shard])
    for cpu_heavy in (True, False):
        groups.extend(first_fit_decreasing((s for s in small if s.cpu_heavy == cpu_heavy),
                                           lambda s: s.gpu_s, cap_s))
    return groups


# ---------------------------------------------------------------- scheduling

def order_trials(trials: Sequence[Trial], rng: random.Random) -> list[Trial]:
    """Long CPU verification first, then longest first; ties broken by the seeded shuffle."""
    shuffled = list(trials)
    rng.shuffle(shuffled)
    heavy = sorted((t for t in shuffled if t.cpu_heavy), key=lambda t: -t.cpu_s)
    light = sorted((t for t in shuffled if not t.cpu_heavy), key=lambda t: -t.gpu_s)
    return heavy + light


def assign(trials: Sequence[Trial], res: Resources) -> list[Trial]:
    """List-schedule onto the least-loaded GPU slot (lowest index on ties)."""
    heap = [(res.preload_s, node, gpu) for node in range(res.nodes) for gpu in range(res.gpus_per_node)]
    heapq.heapify(heap)
    placed = []
    for trial in trials:
        free_at, node, gpu = heapq.heappop(heap)
        end = free_at + trial.gpu_s
        placed.append(_with(trial, node=node, slot=gpu, start_s=free_at, end_s=end))
        heapq.heappush(heap, (end, node, gpu))
    return placed


def score_timeline(trials: Sequence[Trial], res: Resources) -> list[Trial]:
    """FIFO scoring on the CPU pool: each trial's scoring is released when its GPU part ends."""
    lanes = [0.0] * res.score_lanes
    heapq.heapify(lanes)
    out = []
    for trial in sorted(trials, key=lambda t: (t.end_s, t.trial_id)):
        lane_free = heapq.heappop(lanes)
        start = max(lane_free, trial.end_s)
        end = start + trial.cpu_s / res.cpus_per_score_task
        heapq.heappush(lanes, end)
        out.append(_with(trial, score_start_s=start, score_end_s=end))
    return sorted(out, key=lambda t: t.trial_id)


def _with(item, **changes):  # type: ignore[no-untyped-def]
    return replace(item, **changes)


def baseline_makespan(datasets: Sequence[Dataset], priors: Mapping[str, Prior], res: Resources) -> float:
    """One job per dataset in registry order, FIFO onto free GPUs; each loads from
    remote storage, runs inference, then scores in the same job with the GPU idle."""
    heap = [0.0] * res.gpu_slots
    for ds in datasets:
        free_at = heapq.heappop(heap)
        prior = priors[ds.name]
        heapq.heappush(heap, free_at + res.remote_load_s + res.trial_overhead_s + prior.gpu_s + prior.cpu_s)
    return max(heap)


# ------------------------------------------------------------- wrap-around

def _cut(shard: Shard, examples: int) -> tuple[Shard, Shard]:
    """Split a shard after ``examples`` examples (shard numbering is fixed later)."""
    n = shard.stop - shard.start
    frac = examples / n
    head = _with(shard, stop=shard.start + examples, gpu_s=shard.gpu_s * frac, cpu_s=shard.cpu_s * frac)
    tail = _with(shard, start=shard.start + examples, gpu_s=shard.gpu_s * (1 - frac),
                 cpu_s=shard.cpu_s * (1 - frac))
    return head, tail


def wrap_slots(shards: Sequence[Shard], capacities: Sequence[float]) -> list[list[Shard]]:
    """McNaughton's wrap-around: lay the shards end to end and cut them at each slot's
    capacity (on example boundaries). Optimal for splittable work: every slot ends within
    one example of ``capacity``; each shard is cut at most once per slot boundary."""
    slots = len(capacities)
    out: list[list[Shard]] = [[] for _ in range(slots)]
    queue = list(shards)
    slot, room = 0, capacities[0]
    while queue:
        shard = queue.pop(0)
        per = shard.gpu_s / max(1, shard.stop - shard.start)
        if slot == slots - 1 or shard.gpu_s <= room + 1e-9:
            out[slot].append(shard)
            room -= shard.gpu_s
            continue
        fits = int((room + 1e-9) // per) if per > 0 else shard.stop - shard.start
        if fits > 0:
            head, shard = _cut(shard, fits)
            out[slot].append(head)
        queue.insert(0, shard)
        slot += 1
        room = capacities[slot]
    return out


def _renumber(trials: Sequence[Trial]) -> list[Trial]:
    """Give every dataset's pieces their index/count in example order."""
    pieces: dict[str, list[tuple[int, int, int]]] = {}
    for ti, trial in enumerate(trials):
        for si, shard in enumerate(trial.shards):
            pieces.setdefault(shard.dataset, []).append((shard.start, ti, si))
    index: dict[tuple[int, int], tuple[int, int]] = {}
    for entries in pieces.values():
        for i, (_, ti, si) in enumerate(sorted(entries)):
            index[(ti, si)] = (i, len(entries))
    return [_with(t, shards=tuple(_with(s, index=index[(ti, si)][0], count=index[(ti, si)][1])
                                  for si, s in enumerate(t.shards))) for ti, t in enumerate(trials)]


def _size(pieces: Sequence[Shard], res: Resources) -> float:
    """A trial's size for grouping: its GPU seconds or its scoring wall time, the larger."""
    return max(sum(p.gpu_s for p in pieces), sum(p.cpu_s for p in pieces) / res.cpus_per_score_task)


def _wrap_plan(datasets: Sequence[Dataset], priors: Mapping[str, Prior], res: Resources,
               cap_s: float, light_trial_s: float, seed: int) -> list[Trial]:
    """Wrap-around packing: per slot, CPU-heavy pieces first (so their scoring starts
    early), then light ones, each kind merged into trials of at most ~light_trial_s."""
    shards = [s for ds in datasets for s in split_dataset(ds, priors[ds.name], cap_s / 2,
                                                           res.cpus_per_score_task)]
    rng = random.Random(seed)
    rng.shuffle(shards)
    heavy = sorted((s for s in shards if s.cpu_heavy), key=lambda s: -s.cpu_s)
    light = sorted((s for s in shards if not s.cpu_heavy), key=lambda s: -s.gpu_s)
    # Heavy pieces first, spread over the slots (longest scoring first, least-loaded
    # slot), so their long scoring overlaps the light inference everywhere.
    per_slot: list[list[Shard]] = [[] for _ in range(res.gpu_slots)]
    loads = [(0.0, i) for i in range(res.gpu_slots)]
    for shard in heavy:
        load, i = heapq.heappop(loads)
        per_slot[i].append(shard)
        heapq.heappush(loads, (load + shard.gpu_s, i))
    total = sum(s.gpu_s for s in shards)
    rooms = [max(0.0, total / res.gpu_slots - sum(p.gpu_s for p in pieces)) for pieces in per_slot]
    for i, pieces in enumerate(wrap_slots(light, rooms)):
        per_slot[i].extend(pieces)
    trials: list[Trial] = []
    for slot_index, pieces in enumerate(per_slot):
        node, gpu = divmod(slot_index, res.gpus_per_node)
        groups: list[list[Shard]] = []
        for cpu_heavy in (True, False):
            current: list[Shard] = []
            for piece in (p for p in pieces if p.cpu_heavy == cpu_heavy):
                if current and _size([*current, piece], res) > light_trial_s + 1e-9:
                    groups.append(current)
                    current = []
                current.append(piece)
            if current:
                groups.append(current)
        clock = res.preload_s
        for group in groups:
            cost = res.trial_overhead_s + sum(p.gpu_s for p in group)
            trials.append(Trial(trial_id="", shards=tuple(group), gpu_s=cost,
                                cpu_s=sum(p.cpu_s for p in group), node=node, slot=gpu,
                                start_s=clock, end_s=clock + cost))
            clock += cost
    trials.sort(key=lambda t: (t.start_s, t.node, t.slot))
    numbered = [_with(t, trial_id=f"t{i:03d}") for i, t in enumerate(_renumber(trials))]
    return score_timeline(numbered, res)


# ---------------------------------------------------------------------- plan

def _lpt_plan(datasets: Sequence[Dataset], priors: Mapping[str, Prior], res: Resources,
              cap_s: float, seed: int, merge_cap: float | None = None,
              small_share: float = 0.5) -> list[Trial]:
    shards = [s for ds in datasets for s in split_dataset(ds, priors[ds.name], cap_s, res.cpus_per_score_task)]
    merge = cap_s if merge_cap is None else merge_cap
    groups = merge_small(shards, merge, small_s=merge * small_share)
    trials = [Trial(trial_id="", shards=tuple(g), gpu_s=res.trial_overhead_s + sum(s.gpu_s for s in g),
                    cpu_s=sum(s.cpu_s for s in g)) for g in groups]
    ordered = order_trials(trials, random.Random(seed))
    numbered = [_with(t, trial_id=f"t{i:03d}") for i, t in enumerate(ordered)]
    return score_timeline(assign(numbered, res), res)


def plan_evaluation(datasets: Sequence[Dataset], priors: Mapping[str, Prior], res: Resources,
                    *, seed: int = 0, granularities: Sequence[int] = GRANULARITIES,
                    splittable: bool = True) -> Plan:
    """The plan with the smallest predicted makespan among the candidates: longest-first
    list scheduling at each shard granularity, and wrap-around packing with light
    trials of 1, 1/2 and 1/3 of a slot."""
    if not datasets:
        raise InputError("nothing to evaluate: no datasets selected")
    for ds in datasets:
        if ds.num_examples < 1:
            raise InputError(f"dataset {ds.name!r} has no examples")
        if ds.name not in priors:
            raise InputError(f"dataset {ds.name!r} has no prior")
    total = sum(priors[ds.name].gpu_s for ds in datasets)
    cap0 = total / res.gpu_slots
    candidates: list[tuple[str, int, float, list[Trial]]] = []
    if not splittable:  # tools that take whole datasets only: merge, never split
        granularities = ()
        whole = math.inf
        candidates.append(("lpt", 1, cap0, _lpt_plan(datasets, priors, res, whole, seed, merge_cap=cap0)))
        # every whole dataset under a slot's share may merge: fewer engine starts
        candidates.append(("lpt", 1, cap0, _lpt_plan(datasets, priors, res, whole, seed, merge_cap=cap0,
                                                     small_share=1.0)))
    for g in granularities:
        candidates.append(("lpt", g, cap0 / g, _lpt_plan(datasets, priors, res, cap0 / g, seed)))
    for parts in (1, 2, 3) if splittable else ():
        candidates.append(("wrap", parts, cap0, _wrap_plan(datasets, priors, res, cap0, cap0 / parts, seed)))
    best = min(candidates, key=lambda c: max(t.score_end_s for t in c[3]))
    method, g, cap, trials = best
    largest = max(s.gpu_s for t in trials for s in t.shards)
    return Plan(
        resources=res, trials=tuple(trials), granularity=g, method=method, total_gpu_s=total,
        shard_cap_s=cap,
        lower_bound_s=res.preload_s + res.trial_overhead_s + max(total / res.gpu_slots, largest),
        predicted_makespan_s=max(t.score_end_s for t in trials),
        gpu_end_s=max(t.end_s for t in trials),
        baseline_makespan_s=baseline_makespan(datasets, priors, res), seed=seed,
        datasets=tuple(ds.name for ds in datasets),
    )
