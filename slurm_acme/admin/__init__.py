"""Putting slurm-acme on a node and checking it: ``sacme admin install|uninstall|check``.

Everything a node needs ships as package data (``slurm_acme/data/node``), so an
installation never depends on where a source tree happens to live.
"""
