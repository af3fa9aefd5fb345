"""Fault-tolerant pretraining on Slurm (``sacme submit`` / ``supervise``).

``spec`` validates train.yaml; ``plan`` builds the frozen sbatch request and
``submitter`` executes it; ``supervisor`` runs inside the job and asks
``policy`` what each failure means; ``requeue`` is the detached helper that
requeues the job with new exclusions; ``status`` builds what ``sacme status``
shows. ``deps`` is the boundary to diagnosis, health check and checkpoints.
"""
