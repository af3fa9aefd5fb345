"""The small exception hierarchy every command shares.

One handler in the CLI's ``main()`` turns an :class:`AcmeError` into a one-line
message on stderr and its ``exit_code``; anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

from slurm_acme import exitcodes


class AcmeError(Exception):
    """Base of all expected failures; ``str(err)`` is the one-line message."""

    exit_code: int = exitcodes.USAGE


class InputError(AcmeError):
    """Bad user input: a file, a field or a value. Names what was wrong."""


class ConfigError(InputError):
    """``acme.toml`` (or another config file) is malformed or invalid."""


class AccessDenied(InputError):
    """Another user's job, run or evaluation, asked for by someone who is no admin."""


class StoreError(AcmeError):
    """A store operation failed (database locked, disk full, connection lost).

    The store door raises this instead of SQLAlchemy's or the driver's own
    errors, so no caller outside ``slurm_acme.store`` needs to know them.
    """


class StoreUnavailable(StoreError):
    """The database URL cannot be reached or opened."""


class CheckFailed(AcmeError):
    """The thing checked failed (e.g. bad nodes found); exit code 1."""

    exit_code = exitcodes.CHECK_FAILED
