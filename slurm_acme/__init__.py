"""slurm-acme: the systems of Hu et al., "Characterization of Large Language
Model Development in the Datacenter" (NSDI'24), as an add-on for any Slurm site.

Importing the package is cheap on purpose: hooks and CLIs import submodules only
when they need them.
"""

__version__ = "0.1.0"
