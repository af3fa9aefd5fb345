"""``sbatch:`` in train.yaml: extra sbatch options, checked against an allow-list.

The supervisor owns the options that make recovery work (nodes, tasks, output,
requeue, the time-limit signal, the comment, exclusions), so only options that
shape *what* the job gets (memory, features, exclusivity, GRES, a reservation,
...) pass through. Each becomes one ``--key=value`` argv word (a flag for
``true``), never a shell string.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Options that take a value.
VALUE_OPTIONS = (
    "mem", "mem-per-cpu", "mem-per-gpu", "constraint", "cluster-constraint", "prefer",
    "gres", "gres-flags", "gpus", "gpus-per-task", "cpus-per-gpu", "gpu-bind", "gpu-freq",
    "reservation", "licenses", "hint", "tmp", "switches", "wckey", "mail-type", "mail-user",
    "begin", "deadline", "nice", "network", "core-spec", "thread-spec", "threads-per-core",
    "sockets-per-node", "cores-per-socket", "mcs-label", "power", "profile", "acctg-freq",
    "cpu-freq", "delay-boot", "exclusive",
)
#: Options that are plain flags (``true`` adds them, ``false`` leaves them out).
FLAG_OPTIONS = ("exclusive", "oversubscribe", "contiguous", "spread-job", "reboot",
                "use-min-nodes")
ALLOWED = tuple(sorted(set(VALUE_OPTIONS) | set(FLAG_OPTIONS)))
#: Keys train.yaml already has, and where they live.
OWN_KEYS = {"nodes": "nodes", "ntasks-per-node": "ntasks_per_node", "partition": "partition",
            "time": "time", "account": "account", "qos": "qos", "exclude": "fault_tolerance.exclude",
            "cpus-per-task": "cpus_per_task", "gpus-per-node": "gpus_per_node",
            "job-name": "name", "chdir": "workdir"}


def _value_ok(value: str) -> bool:
    return bool(value) and not any(ord(ch) < 32 or ord(ch) == 127 for ch in value)


def render_sbatch_options(options: Mapping[str, str | int | bool]) -> list[str]:
    """The argv words for ``options``; ValueError names a key that is not allowed and the
    allowed ones, or a value that cannot be an sbatch option value."""
    words = []
    for raw_key, value in options.items():
        key = str(raw_key).strip().lstrip("-").replace("_", "-").lower()
        if key in OWN_KEYS:
            raise ValueError(f"{raw_key!r} is set by train.yaml's own field {OWN_KEYS[key]!r}, "
                             "not under sbatch")
        if key not in ALLOWED:
            raise ValueError(f"{raw_key!r} is not an sbatch option that may pass through "
                             f"(allowed: {', '.join(ALLOWED)})")
        if isinstance(value, bool):
            if key not in FLAG_OPTIONS:
                raise ValueError(f"{raw_key!r} needs a value (e.g. {key}: ...), not {value}")
            if value:
                words.append(f"--{key}")
            continue
        text = str(value).strip()
        if key not in VALUE_OPTIONS:
            raise ValueError(f"{raw_key!r} is a flag: write {key}: true")
        if not _value_ok(text):
            raise ValueError(f"{raw_key!r}: {value!r} is not a valid value (empty or a control "
                             "character)")
        words.append(f"--{key}={text}")
    return words
