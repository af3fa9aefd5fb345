"""Find faulty nodes with two rounds of allgather tests (the paper's s6.1).

``run_health_check(nodes, ...) -> HealthReport`` is the entry point; the pure
algorithm is :mod:`.bisection`, the srun/torch transport :mod:`.transport`,
the node-local pre-checks :mod:`.precheck` and the per-node worker
:mod:`.worker`.
"""

from slurm_acme.health.check import run_health_check
from slurm_acme.health.records import Evidence, HealthReport, TestResult

__all__ = ["Evidence", "HealthReport", "TestResult", "run_health_check"]
