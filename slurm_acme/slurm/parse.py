"""Pure parsers of Slurm's output into records. No I/O, no subprocesses.

One set of functions reads every JSON layout from Slurm 22.05 (OpenAPI
v0.0.38) to 24.11 (data_parser v0.0.42). Newer layouts wrap numbers as
``{"set", "infinite", "number"}`` objects, turn states into lists and nest
exit codes; the small helpers :func:`number`, :func:`timestamp`,
:func:`exit_status` and :func:`gpus_in_tres` absorb those differences so the
record builders stay flat.

Slurm's "no value" markers never leave this module as values: the NO_VAL and
INFINITE sentinels of 16-, 32- and 64-bit fields (``4294967294`` as the start
of a job that never started), negative TRES counts (``energy=-2``, the 64-bit
NO_VAL printed signed), ``(null)`` in text, and times derived from a sentinel
(a pending job's end in the year 2163) all become ``None`` or ``''``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from slurm_acme.slurm.errors import SlurmParseError
from slurm_acme.slurm.records import NodeEvent, NodeInfo, QueueJob, SacctJob, ScontrolJob, ScontrolNode
from slurm_acme.slurm.states import JobState

Doc = Mapping[str, Any]


# ------------------------------------------------------------------ helpers

def load_json(text: str | Doc, what: str = "slurm") -> Doc:
    """Decode a ``--json`` answer (already-decoded mappings pass through)."""
    if isinstance(text, Mapping):
        return text
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmParseError([what, "--json"], 0, text[:200],
                              f"`{what} --json` printed something that is not JSON: {exc}") from None
    if not isinstance(doc, Mapping):
        raise SlurmParseError([what, "--json"], 0, "", f"`{what} --json` did not print an object")
    return doc


#: What a parser may trip on in a document whose layout it does not know (a field of
#: another type, a record that is not an object); turned into :class:`SlurmParseError`.
_LAYOUT_ERRORS = (AttributeError, TypeError, KeyError, ValueError, IndexError, OverflowError)


def _unexpected_layout(what: str, exc: Exception) -> SlurmParseError:
    return SlurmParseError([what, "--json"], 0, "",
                           f"`{what} --json` printed a layout this slurm-acme cannot read "
                           f"({type(exc).__name__}: {str(exc)[:200]})")


def plugin_version(doc: Doc) -> str:
    """The OpenAPI plugin that wrote ``doc``, e.g. ``openapi/dbv0.0.38`` ('' if absent)."""
    plugin = (doc.get("meta") or {}).get("plugin") or {}
    return str(plugin.get("type") or "")


#: Slurm's "no value" (NO_VAL*) and "unlimited" (INFINITE*) markers, by field width (slurm.h).
NO_VAL16, INFINITE16 = 0xFFFE, 0xFFFF
NO_VAL, INFINITE = 0xFFFF_FFFE, 0xFFFF_FFFF
NO_VAL64, INFINITE64 = 0xFFFF_FFFF_FFFF_FFFE, 0xFFFF_FFFF_FFFF_FFFF
_SENTINELS = {
    64: frozenset({NO_VAL64, INFINITE64}),
    32: frozenset({NO_VAL, INFINITE, NO_VAL64, INFINITE64}),
    16: frozenset({NO_VAL16, INFINITE16, NO_VAL, INFINITE, NO_VAL64, INFINITE64}),
}


def number(value: Any, bits: int = 32) -> int | None:
    """A plain number or a ``{"set": ..., "infinite": ..., "number": N}`` object.

    Unset and infinite values are ``None``, and so are Slurm's sentinels for a
    field of ``bits`` width or wider: a 32-bit field's NO_VAL ``4294967294``
    is "no value", while in a 64-bit field (a TRES count, memory) it is a number.
    """
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    numeric_text = isinstance(value, str) and value.strip().lstrip("-").isdigit()
    if isinstance(value, float) or numeric_text:
        value = int(value)
    if not isinstance(value, int):
        return None
    return None if value in _SENTINELS[bits] else value


def timestamp(value: Any) -> datetime | None:
    """Epoch seconds (plain or number object) as an aware UTC datetime.

    0 (never) is ``None``, and so is anything from NO_VAL on (the year 2106):
    Slurm's sentinels and the "ends" it derives from them by adding a time
    limit (a pending job's ``end_time`` of 6091078544) are no moments.
    """
    seconds = number(value, bits=64)
    if seconds is None or seconds <= 0 or seconds >= NO_VAL:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def exit_status(value: Any) -> tuple[int, int | None]:
    """(exit code, signal or None) from any layout.

    22.05 squeue gives a raw wait status (``768`` is exit 3); sacct gives
    ``{"return_code": 3, "signal": {"signal_id": 9}}``; newer versions wrap both
    numbers as number objects and put the signal under ``signal.id``.
    """
    if isinstance(value, Mapping):
        signal = value.get("signal") or {}
        sig = number(signal.get("id", signal.get("signal_id"))) if isinstance(signal, Mapping) else None
        return number(value.get("return_code")) or 0, sig or None
    raw = number(value)
    if raw is None:
        return 0, None
    return (raw >> 8) & 0xFF, (raw & 0x7F) or None


def as_text(value: Any) -> str:
    """A string field; ``None`` and Slurm's ``(null)`` become ''."""
    if value is None or value == "(null)":
        return ""
    return str(value)


def tres_amount(value: Any) -> int | None:
    """One TRES count (a 64-bit field): sentinels and negative counts are ``None``.

    24.11 prints an energy count it never measured as ``-2`` (NO_VAL64, signed).
    """
    count = number(value, bits=64)
    return None if count is None or count < 0 else count


#: A GPU count in any TRES text form: ``gres/gpu=16`` (AllocTRES, tres_alloc_str),
#: ``gres:gpu:8`` / ``gres/gpu:a100=4`` / ``gres:gpu:a100:2`` (TresPerNode, 22.05 and 24.11).
_GPU_TRES = re.compile(r"(?:^|,)gres[:/]gpu(?::[^:=,\s]+)?[:=](\d+)(?=$|[,(\s])")


def gpus_in_tres(tres: Any) -> int | None:
    """GPU count in a TRES list (``[{"type": "gres", "name": "gpu", "count": 16}]``)
    or string (``cpu=2,gres/gpu=16``, a TresPerNode ``gres:gpu:8``); typed entries
    (``gres/gpu:a100``) after the plain one are not double counted.
    """
    if isinstance(tres, str):
        match = _GPU_TRES.search(tres.strip())
        return int(match.group(1)) if match else None
    for item in tres or ():
        if item.get("type") == "gres" and item.get("name") == "gpu":
            return tres_amount(item.get("count"))
    return None


def tres_count(tres: Any, kind: str) -> int | None:
    for item in tres or ():
        if item.get("type") == kind and not item.get("name"):
            return tres_amount(item.get("count"))
    return None


def tres_string(tres: Any) -> str:
    """Render a TRES list the way sacct's AllocTRES column does: sorted, no unset counts."""
    parts = []
    for item in tres or ():
        count = tres_amount(item.get("count"))
        if count is None:
            continue
        kind = as_text(item.get("type"))
        name = as_text(item.get("name"))
        parts.append(f"{kind}/{name}={count}" if name else f"{kind}={count}")
    return ",".join(sorted(parts))


def _array(job_id: Any, task_id: Any) -> tuple[str | None, int | None]:
    array_id = number(job_id)
    if not array_id:
        return None, None
    return str(array_id), number(task_id)


# -------------------------------------------------------------------- sacct

def parse_sacct_json(text: str | Doc) -> list[SacctJob]:
    """Job allocations from ``sacct --json``; steps are ignored.

    Slurm records each requeue as its own accounting row with the same job id;
    those fold into one job (the latest row) whose ``restarts`` counts them.
    """
    doc = load_json(text, "sacct")
    latest: dict[tuple[str, str], Mapping[str, Any]] = {}
    rows: dict[tuple[str, str], int] = {}
    try:
        for raw in doc.get("jobs") or ():
            key = (as_text(raw.get("cluster")), str(number(raw.get("job_id"))))
            rows[key] = rows.get(key, 0) + 1
            if key not in latest or _submitted(raw) >= _submitted(latest[key]):
                latest[key] = raw
        return [_sacct_job(raw, rows[key] - 1) for key, raw in latest.items()]
    except _LAYOUT_ERRORS as exc:
        raise _unexpected_layout("sacct", exc) from None


def _submitted(raw: Doc) -> int:
    return number((raw.get("time") or {}).get("submission")) or 0


def _sacct_job(raw: Doc, extra_rows: int) -> SacctJob:
    time = raw.get("time") or {}
    tres = raw.get("tres") or {}
    array = raw.get("array") or {}
    comment = raw.get("comment")
    code, sig = exit_status(raw.get("exit_code"))
    state = raw.get("state") or {}
    nodelist = as_text(raw.get("nodes"))
    array_id, task_id = _array(array.get("job_id"), array.get("task_id"))
    return SacctJob(
        job_id=str(number(raw.get("job_id"))),
        cluster=as_text(raw.get("cluster")),
        user=as_text(raw.get("user")),
        name=as_text(raw.get("name")),
        partition=as_text(raw.get("partition")),
        account=as_text(raw.get("account")),
        comment=as_text(comment.get("job") if isinstance(comment, Mapping) else comment),
        nodes=number(raw.get("allocation_nodes")) or tres_count(tres.get("allocated"), "node") or 0,
        nodelist="" if nodelist == "None assigned" else nodelist,
        gpus=_first_number(gpus_in_tres(tres.get("allocated")), gpus_in_tres(tres.get("requested"))),
        cpus=_first_number(tres_count(tres.get("allocated"), "cpu"),
                           number((raw.get("required") or {}).get("CPUs"))),
        submit=timestamp(time.get("submission")),
        eligible=timestamp(time.get("eligible")),
        start=timestamp(time.get("start")),
        end=timestamp(time.get("end")),
        state=JobState.parse(state.get("current") if isinstance(state, Mapping) else state),
        exit_code=code,
        signal=sig,
        restarts=max(number(raw.get("restart_cnt"), bits=16) or 0, extra_rows),
        array_job_id=array_id,
        array_task_id=task_id,
        alloc_tres=tres_string(tres.get("allocated")),
        reason=as_text(state.get("reason")) if isinstance(state, Mapping) else "",
    )


def _first_number(*values: int | None) -> int:
    return next((v for v in values if v), 0)


def parse_sacct_exit_codes(text: str) -> dict[str, tuple[int, int | None]]:
    """``sacct -n -P -X -o JobIDRaw,ExitCode`` -> {job id: (code, signal)}.

    Slurm 22.05's JSON reports every job's exit code as 0; this plain listing
    is where the real codes are read from on that version.
    """
    codes: dict[str, tuple[int, int | None]] = {}
    for line in text.splitlines():
        job_id, _, exit_code = line.strip().partition("|")
        code, _, sig = exit_code.partition(":")
        if job_id and code.isdigit():
            codes[job_id] = (int(code), int(sig) if sig.isdigit() and int(sig) else None)
    return codes


# ------------------------------------------------------------------- squeue

def parse_squeue_json(text: str | Doc) -> list[QueueJob]:
    """Jobs in the queue from ``squeue --json``."""
    doc = load_json(text, "squeue")
    try:
        return [_queue_job(raw) for raw in doc.get("jobs") or ()]
    except _LAYOUT_ERRORS as exc:
        raise _unexpected_layout("squeue", exc) from None


def _queue_end(raw: Doc, state: JobState) -> datetime | None:
    """When the job ended or must end; ``None`` where Slurm only extrapolates.

    squeue's ``end_time`` of a pending job is its expected start plus its time
    limit (NO_VAL for an unlimited one: the year 2163), and a running job with
    no limit gets start + 365 days; ``scontrol`` says ``EndTime=Unknown`` to both.
    """
    if state is JobState.PENDING:
        return None
    if not state.is_terminal() and number(raw.get("time_limit")) is None:
        return None
    return timestamp(raw.get("end_time"))


def _queue_job(raw: Doc) -> QueueJob:
    exit_raw = raw.get("exit_code")
    array_id, task_id = _array(raw.get("array_job_id"), raw.get("array_task_id"))
    state = JobState.parse(raw.get("job_state"))
    return QueueJob(
        job_id=str(number(raw.get("job_id"))),
        name=as_text(raw.get("name")),
        user=as_text(raw.get("user_name")),
        partition=as_text(raw.get("partition")),
        account=as_text(raw.get("account")),
        state=state,
        reason=as_text(raw.get("state_reason")),
        nodes=number(raw.get("node_count")) or 0,
        nodelist=as_text(raw.get("nodes")),
        gpus=_first_number(gpus_in_tres(as_text(raw.get("tres_alloc_str"))),
                           gpus_in_tres(as_text(raw.get("tres_req_str")))),
        cpus=number(raw.get("cpus")) or 0,
        comment=as_text(raw.get("comment")),
        submit=timestamp(raw.get("submit_time")),
        start=timestamp(raw.get("start_time")),
        end=_queue_end(raw, state),
        restarts=number(raw.get("restart_cnt"), bits=16) or 0,
        array_job_id=array_id,
        array_task_id=task_id,
        exit_code=None if exit_raw is None else exit_status(exit_raw)[0],
    )


# ----------------------------------------------------------------- scontrol

_KEY = re.compile(r"\s+(?=[A-Z][\w/:]*=)")


def _records(text: str, first_key: str) -> list[dict[str, str]]:
    """``Key=Value`` records of ``scontrol show ... [-o]`` (one line or one block each).

    A value may contain spaces (job names, paths, the OS string); a new field
    starts where a ``Key=`` follows whitespace. A repeated key keeps its first
    value; ``(null)`` is ''.
    """
    records = []
    for block in re.split(rf"(?:^|\s)(?={first_key}=)", text):
        block = block.strip()
        if not block.startswith(f"{first_key}="):
            continue
        fields: dict[str, str] = {}
        for token in _KEY.split(block):
            key, _, value = token.partition("=")
            fields.setdefault(key, as_text(value.strip()))
        records.append(fields)
    return records


def parse_scontrol_show_job(text: str) -> list[ScontrolJob]:
    """Jobs from ``scontrol show job [-o]``."""
    return [ScontrolJob(fields=f) for f in _records(text, "JobId")]


def parse_scontrol_show_node(text: str) -> list[ScontrolNode]:
    """Nodes from ``scontrol show node [-o]``."""
    return [ScontrolNode(fields=f) for f in _records(text, "NodeName")]


_CONFIG_LINE = re.compile(r"^(\w+)(?:\[(\d+)\])?\s*=\s?(.*)$")


def parse_scontrol_show_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key = Value`` lines (first wins); ``(null)`` is ''.

    Keys Slurm prints with an index (``SlurmctldHost[0]``, and from 24.11
    ``Prolog[0]``, ``Epilog[0]``) come back under their plain name, several
    indices joined by commas as slurm.conf writes them (``Prolog=/a,/b``).
    """
    config: dict[str, str] = {}
    indexed: dict[str, dict[int, str]] = {}
    for line in text.splitlines():
        match = _CONFIG_LINE.match(line)
        if not match:
            continue
        key, index, value = match.group(1), match.group(2), as_text(match.group(3).strip())
        if index is None:
            config.setdefault(key, value)
        else:
            indexed.setdefault(key, {}).setdefault(int(index), value)
    for key, values in indexed.items():
        config.setdefault(key, ",".join(v for _, v in sorted(values.items()) if v))
    return config


_GRES_GROUP = re.compile(r"\bNodes=(\S+)\s+CPU_IDs=\S*\s+Mem=\S+\s+GRES=(\S*)")
_GPU_IDX = re.compile(r"gpu(?::[^:(,]+)?:\d+\(IDX:([\d,\-]+)\)")


def parse_job_gpu_groups(text: str) -> list[tuple[str, list[int]]]:
    """(hostlist, GPU indices) per allocation group of ``scontrol -d show job``.

    ``Nodes=node[1-2] CPU_IDs=2 Mem=0 GRES=gpu:3(IDX:2-4)`` -> ``("node[1-2]", [2, 3, 4])``.
    """
    groups = []
    for hostlist, gres in _GRES_GROUP.findall(text):
        indices: list[int] = []
        for spans in _GPU_IDX.findall(gres):
            for span in spans.split(","):
                lo, _, hi = span.partition("-")
                indices.extend(range(int(lo), int(hi or lo) + 1))
        groups.append((hostlist, sorted(indices)))
    return groups


#: More node names than any cluster has: a hostlist past this is not Slurm's.
MAX_HOSTLIST_NAMES = 1 << 20


def expand_hostlist(hostlist: str) -> list[str]:
    """``node[1-3,5],gpu7`` -> node1 node2 node3 node5 gpu7, keeping zero padding.

    Pure, for parsers that must not call ``scontrol show hostnames``; handles
    one bracket group per name (what Slurm prints for flat node names).
    """
    names: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", hostlist):
        match = re.fullmatch(r"(.*)\[([^\]]*)\](.*)", item)
        if not match:
            names.append(item)
            continue
        prefix, ranges, suffix = match.groups()
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or not (hi or lo).isdigit() or not lo.isascii() or not (hi or lo).isascii():
                raise SlurmParseError(["hostlist"], 0, "", f"not a Slurm hostlist: {hostlist[:200]!r}")
            if int(hi or lo) - int(lo) + len(names) >= MAX_HOSTLIST_NAMES:
                raise SlurmParseError(["hostlist"], 0, "", f"hostlist of over {MAX_HOSTLIST_NAMES} names: "
                                                           f"{hostlist[:200]!r}")
            for number in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{number:0{len(lo)}d}{suffix}")
    return names


def gpu_indices_on(text: str, node: str) -> tuple[int, ...] | None:
    """GPU indices on ``node`` from ``scontrol -d -o show job`` (None: node not in the job)."""
    for hostlist, indices in parse_job_gpu_groups(text):
        if node in expand_hostlist(hostlist):
            return tuple(indices)
    return None


def node_addresses(nodes: Iterable[ScontrolNode]) -> dict[str, str]:
    """{name: ``NodeAddr``} of the nodes that report one."""
    return {n.name: n.get("NodeAddr") for n in nodes if n.name and n.get("NodeAddr")}


def parse_hostnames(text: str) -> list[str]:
    """``scontrol show hostnames LIST``: one host per line."""
    return [line.strip() for line in text.splitlines() if line.strip()]


SINFO_FORMAT = "%N|%T|%G"


def parse_sinfo_nodes(text: str) -> list[NodeInfo]:
    """``sinfo -N -h -o '%N|%T|%G'``; a node in several partitions is listed once."""
    seen: dict[str, NodeInfo] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            seen.setdefault(parts[0], NodeInfo(parts[0], parts[1], as_text(parts[2]) if len(parts) > 2 else ""))
    return list(seen.values())


#: ``sacctmgr list event`` columns, in the order :func:`parse_sacctmgr_events` reads them.
EVENT_FORMAT = "NodeName,TimeStart,State,Reason"


def parse_sacctmgr_events(text: str) -> list[NodeEvent]:
    """``sacctmgr -n -P list event format=NodeName,TimeStart,State,Reason`` -> node events.

    Times are the local wall clock, as every Slurm text command prints them; cluster-wide
    events (no node name) are left out. The reason may itself hold ``|``.
    """
    events = []
    for line in text.splitlines():
        node, _, rest = line.strip().partition("|")
        start, _, rest = rest.partition("|")
        state, _, reason = rest.partition("|")
        if not node or not state:
            continue
        try:
            when: datetime | None = datetime.fromisoformat(start).astimezone()
        except ValueError:
            when = None
        events.append(NodeEvent(node=node, start=when, state=state, reason=reason))
    return events


def parse_sbatch_parsable(text: str) -> str:
    """``sbatch --parsable`` prints ``JOBID`` or ``JOBID;CLUSTER``."""
    job_id = text.strip().splitlines()[-1].split(";")[0].strip() if text.strip() else ""
    if not job_id.isdigit():
        raise SlurmParseError(["sbatch", "--parsable"], 0, text,
                              f"sbatch printed no job id: {text.strip()[:200]!r}")
    return job_id


def join_ids(ids: Iterable[str | int]) -> str:
    return ",".join(str(i) for i in ids)


_SDIAG_TIME = re.compile(r"^sdiag output at .*\((\d+)\)\s*$", re.MULTILINE)


def parse_sdiag_time(text: str) -> int:
    """The controller's clock (Unix seconds) from ``sdiag``'s header line.

    slurmctld stamps its statistics reply with its own ``time(NULL)``; sdiag
    prints it as ``sdiag output at <date> (<epoch>)``. The cheapest way to read
    the controller's clock through Slurm alone (1 s resolution).
    """
    found = _SDIAG_TIME.search(text)
    if not found:
        raise SlurmParseError(["sdiag"], 0, text[:200], "sdiag printed no 'sdiag output at ... (EPOCH)' line")
    return int(found.group(1))
