"""Runtime priors per dataset and model size: GPU seconds and CPU-scoring seconds.

Before a dataset has been measured its prior comes from the OpenCompass size
heuristic (``oc_cost_units``: examples x max output length for gen datasets,
examples x choices for ppl ones) scaled linearly by model size. After each
evaluation the aggregation step folds the measured seconds in with an EWMA
(:func:`ewma`), and the measured prior replaces the heuristic for that
dataset and size bucket.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from slurm_acme.evaluate.registry import Dataset

if TYPE_CHECKING:
    from slurm_acme.store.engine import Store

#: Reference model size the per-unit constants are expressed for (billions of parameters).
REFERENCE_SIZE_B = 7.0


@dataclass(frozen=True)
class HeuristicModel:
    """Constants of the cold-start prior for a 7B model on one GPU slot.

    ``sec_per_unit`` is one OpenCompass cost unit of inference (about one
    generated token per example in a batched engine): 0.0012 s puts bbh at
    ~26 GPU-minutes and all 63 datasets at ~1.9 GPU-hours for a 7B model, the
    scale of OpenCompass runs on A100s. Preprocessing (reading, tokenising and
    building prompts) is per example; scoring cost per example depends on
    the metric: executing programs and calling judges dwarf string matching.
    """

    sec_per_unit: float = 0.0012
    preprocess_base_s: float = 4.0
    preprocess_per_example_s: float = 0.004
    score_base_s: float = 1.0
    score_code_per_example_s: float = 1.2
    score_judge_per_example_s: float = 2.0
    score_partial_per_example_s: float = 0.05
    score_text_per_example_s: float = 0.02
    score_match_per_example_s: float = 0.002


DEFAULT_HEURISTIC = HeuristicModel()


@dataclass(frozen=True)
class Prior:
    """Expected seconds to run one whole dataset: inference on one GPU slot
    (including its data preprocessing) and CPU scoring (one CPU)."""

    gpu_s: float
    cpu_s: float
    samples: int = 0  # 0 = heuristic, else number of measured runs folded in

    @property
    def source(self) -> str:
        return "measured" if self.samples else "heuristic"


def size_bucket(size_b: float) -> float:
    """Model sizes within two significant digits share measured priors (6.7B ~ 6.7B)."""
    return float(f"{size_b:.2g}") if size_b > 0 else 0.0


def preprocess_s(ds: Dataset, model: HeuristicModel = DEFAULT_HEURISTIC) -> float:
    return model.preprocess_base_s + model.preprocess_per_example_s * ds.num_examples


def inference_s(ds: Dataset, size_b: float, model: HeuristicModel = DEFAULT_HEURISTIC) -> float:
    return ds.oc_cost_units * model.sec_per_unit * (size_b / REFERENCE_SIZE_B)


def scoring_s(ds: Dataset, model: HeuristicModel = DEFAULT_HEURISTIC) -> float:
    if ds.is_code:
        per = model.score_code_per_example_s
    elif ds.is_judge:
        per = model.score_judge_per_example_s
    elif ds.cpu_heavy == "partial":
        per = model.score_partial_per_example_s
    elif any(word in ds.metric for word in ("ROUGE", "BLEU", "BLEURT", "F1", "equivalence")):
        per = model.score_text_per_example_s
    else:
        per = model.score_match_per_example_s
    return model.score_base_s + per * ds.num_examples


def heuristic_prior(ds: Dataset, size_b: float, model: HeuristicModel = DEFAULT_HEURISTIC) -> Prior:
    """The cold-start prior: OpenCompass cost units scaled by model size."""
    return Prior(gpu_s=preprocess_s(ds, model) + inference_s(ds, size_b, model),
                 cpu_s=scoring_s(ds, model), samples=0)


def ewma(old: Prior, gpu_s: float, cpu_s: float, *, alpha: float = 0.3) -> Prior:
    """Fold one measurement in. The first measurement replaces the heuristic;
    the next ones weigh at least ``alpha`` (1/(n+1) while that is larger)."""
    if old.samples == 0:
        return Prior(gpu_s=gpu_s, cpu_s=cpu_s, samples=1)
    weight = max(alpha, 1.0 / (old.samples + 1))
    return Prior(gpu_s=old.gpu_s + weight * (gpu_s - old.gpu_s),
                 cpu_s=old.cpu_s + weight * (cpu_s - old.cpu_s),
                 samples=old.samples + 1)


class _Stored(Protocol):
    @property
    def gpu_s(self) -> float: ...
    @property
    def cpu_s(self) -> float: ...
    @property
    def samples(self) -> int: ...


def fold_measurements(measured: Mapping[str, tuple[float, float]],
                      alpha: float = 0.3) -> Callable[[Mapping[str, _Stored]], dict[str, Prior]]:
    """The computation the store applies to stored priors: EWMA each (GPU s, CPU s) in."""
    def fold(old: Mapping[str, _Stored]) -> dict[str, Prior]:
        out = {}
        for name, (gpu, cpu) in measured.items():
            was = old.get(name)
            prior = Prior(was.gpu_s, was.cpu_s, was.samples) if was else Prior(0.0, 0.0, 0)
            out[name] = ewma(prior, gpu, cpu, alpha=alpha)
        return out
    return fold


def measured_priors(store: Store, size_b: float) -> dict[str, Prior]:
    """Measured priors for this model size's bucket."""
    from slurm_acme.store import evaluate as store_eval

    return {name: Prior(r.gpu_s, r.cpu_s, r.samples)
            for name, r in store_eval.load_priors(store, size_bucket(size_b)).items()}


def record_measurements(store: Store, size_b: float, measured: Mapping[str, tuple[float, float]]) -> dict[str, Prior]:
    """Fold whole-dataset measurements (GPU s, CPU s) into the stored priors; the new ones."""
    from slurm_acme.store import evaluate as store_eval

    new = store_eval.fold_priors(store, size_bucket(size_b), list(measured), fold_measurements(measured))
    return {name: Prior(r.gpu_s, r.cpu_s, r.samples) for name, r in new.items()}


def resolve_priors(datasets: Sequence[Dataset], size_b: float,
                   measured: Mapping[str, Prior] | None = None,
                   model: HeuristicModel = DEFAULT_HEURISTIC) -> dict[str, Prior]:
    """A prior for every dataset: measured (for this size bucket) where known, else heuristic."""
    measured = measured or {}
    return {ds.name: measured.get(ds.name) or heuristic_prior(ds, size_b, model) for ds in datasets}
