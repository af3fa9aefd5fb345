"""``python -m slurm_acme`` is ``sacme`` (handy inside jobs without entry points)."""

from slurm_acme.cli.main import sacme_main

sacme_main()
