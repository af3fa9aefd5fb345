"""Errors raised by the door to Slurm; each carries the command and Slurm's words."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_acme.errors import AcmeError


class SlurmError(AcmeError):
    """A Slurm command failed; ``str()`` quotes the command and Slurm's stderr."""

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str,
                 message: str | None = None) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        last = self.stderr.splitlines()[-1] if self.stderr else "no error output"
        super().__init__(message or f"`{' '.join(self.argv[:2])}` failed "
                         f"(exit {returncode}): {last}")


class SlurmUnavailable(SlurmError):
    """Slurm is not installed here, or slurmctld/slurmdbd cannot be reached."""


class SlurmParseError(SlurmError):
    """Slurm answered with output this version of slurm-acme cannot read."""


class JobNotFound(SlurmError):
    """slurmctld does not know the job (never existed, or aged out after ``MinJobAge``)."""
