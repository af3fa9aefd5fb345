"""The single function through which every Slurm command runs.

Tests fake this door (or put a fake binary on ``PATH``) and nothing deeper.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Mapping, Sequence

from slurm_acme.slurm.errors import SlurmError, SlurmUnavailable

log = logging.getLogger(__name__)

#: Slurm's words when the controller or the accounting daemon cannot be reached.
_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Slurm controller not responding"
    r"|Socket timed out on send/recv|Connection refused|Zero Bytes were transmitted"
    r"|slurmdbd: Problem talking to|Problem talking to the database"
    r"|Unable to establish Slurm connection|Could not establish a connection"
    r"|Munge encode failed|Unable to process configuration file|Unable to setup connection"
    r"|Couldn't find the specified plugin",
    re.IGNORECASE,
)


def run_slurm(argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
              stdin: str | None = None) -> str:
    """Run one Slurm command (an argument list, never a shell string); return stdout.

    Raises :class:`SlurmUnavailable` when the binary is missing, the command
    times out, or Slurm says its daemons cannot be reached, and
    :class:`SlurmError` (with the argv, exit code and stderr) for any other
    non-zero exit.
    """
    argv = [str(a) for a in argv]
    full_env = {**os.environ, **env} if env is not None else None
    log.debug("slurm: %s", argv)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=full_env, input=stdin, check=False)
    except FileNotFoundError:
        raise SlurmUnavailable(argv, None, "", f"`{argv[0]}` not found: is Slurm installed "
                               "and on PATH?") from None
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(argv, None, "", f"`{' '.join(argv[:2])}` gave no answer in "
                               f"{timeout:g}s: is slurmctld running?") from None
    if proc.returncode != 0:
        cls = SlurmUnavailable if _UNREACHABLE.search(proc.stderr) else SlurmError
        raise cls(argv, proc.returncode, proc.stderr or proc.stdout)
    return proc.stdout
