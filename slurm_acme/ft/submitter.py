"""Execute a :class:`SubmitPlan`: check it fits the cluster, record the run, sbatch it.

Nothing is half-submitted: the folders and the run row are created first and
removed again if anything after them fails (``sbatch`` refusing, the store, an
interrupt), so a failed submit leaves no trace. The run folder is private
(see :mod:`slurm_acme.files`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from slurm_acme.access import current_viewer
from slurm_acme.errors import InputError
from slurm_acme.files import make_private_dirs, remove_created
from slurm_acme.ft.plan import SubmitPlan
from slurm_acme.ft.states import RunState
from slurm_acme.slurm import NodeInfo, Slurm
from slurm_acme.store import Store
from slurm_acme.store import runs as run_store


def check_fits(plan: SubmitPlan, nodes: Sequence[NodeInfo]) -> None:
    """Reject a spec the cluster can never run (more nodes than it has, all excluded)."""
    spec = plan.spec
    names = {n.name for n in nodes}
    unknown = sorted(set(spec.fault_tolerance.exclude) - names)
    if unknown:
        raise InputError(f"{plan.spec_path}: field 'fault_tolerance.exclude': "
                         f"unknown node(s) {', '.join(unknown)} (cluster has {len(names)} nodes)")
    usable = names - set(spec.fault_tolerance.exclude)
    if spec.allocated_nodes > len(usable):
        extra = f" after excluding {len(names) - len(usable)}" if len(usable) < len(names) else ""
        spares = spec.fault_tolerance.spare_count
        if spares and spec.nodes <= len(usable):
            raise InputError(f"{plan.spec_path}: field 'fault_tolerance.spares': {spec.nodes} "
                             f"nodes + {spares} spare(s) requested but the cluster has "
                             f"{len(usable)}{extra}")
        raise InputError(f"{plan.spec_path}: field 'nodes': {spec.allocated_nodes} nodes "
                         f"requested but the cluster has {len(usable)}{extra}")


def submit_plan(plan: SubmitPlan, *, slurm: Slurm, store: Store, cluster: str,
                group: str | None = None) -> str:
    """Submit and record; return the Slurm job id. ``group``: ``files.group``."""
    check_fits(plan, slurm.sinfo_nodes())
    created = make_private_dirs(plan.run_dir, group)
    recorded = False
    try:
        created += make_private_dirs(Path(plan.workdir) / Path(plan.spec.checkpoint.dir).expanduser(), group)
        run_store.create_run(store, run_id=plan.run_id, name=plan.spec.name, cluster=cluster,
                             user=current_viewer().name, spec=plan.spec.to_json(), workdir=plan.workdir,
                             created_ts=time.time(), state=RunState.SUBMITTING.value)
        recorded = True
        job_id = slurm.sbatch(plan.sbatch_options, plan.script)
    except BaseException:
        if recorded:
            run_store.delete_run(store, plan.run_id)
        remove_created(created)
        raise
    run_store.update_run(store, plan.run_id, state=RunState.PENDING.value, last_job_id=job_id)
    return job_id
