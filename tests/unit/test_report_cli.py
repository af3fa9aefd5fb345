"""``sacme report`` as a user meets it: flags, formats, files, errors, access."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from slurm_acme.access import Viewer, visible_user
from slurm_acme.cli.main import run_cli, sacme
from slurm_acme.errors import InputError
from slurm_acme.report.labels import SECTION_TITLES
from slurm_acme.report.model import SECTIONS
from slurm_acme.report.period import month_period, resolve_period
from slurm_acme.report.synthetic import synthetic_jobs
from slurm_acme.store import open_store
from slurm_acme.store.rows import upsert
from slurm_acme.store.schema.core import jobs

JULY = month_period("2023-07")


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'acme.db'}"
    store = open_store(url)
    rows = list(synthetic_jobs(400, seed=3, start_ts=JULY.since_ts - 5 * 86400, span_s=40 * 86400,
                               cluster="seren", users=4))
    with store.engine.begin() as conn:
        upsert(conn, jobs, rows, ["cluster", "job_id"])
    store.dispose()
    return url


def sacme_run(capsys, db: str, *args: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = run_cli(sacme, "sacme", ["--db", db, "report", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def numbers(value: object) -> list[object]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def test_json_has_one_key_per_section_and_only_plain_floats(capsys, db: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = sacme_run(capsys, db, "--month", "2023-07", "--cluster", "seren", "--format", "json", "--compare")
    data = json.loads(out)
    assert code == 0
    assert list(data) == list(SECTIONS)
    assert all(type(n) is float for n in numbers(data))
    shares = [w["gpu_job_share"] for w in data["workload"].values() if w["gpu_job_share"] is not None]
    assert all(0 <= s <= 1 for s in shares) and sum(shares) == pytest.approx(1.0)


def test_text_report_leads_with_findings_then_every_job_section(capsys, db: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = sacme_run(capsys, db, "--month", "2023-07", "--compare")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "sacme report: 2023-07 (all jobs)"
    assert next(line for line in lines[1:] if line.strip()).startswith("Findings")
    positions = [out.index(f"\n{SECTION_TITLES[s]}\n") for s in
                 ("overview", "workload", "durations", "scale", "states", "compare")]
    assert positions == sorted(positions) and out.index("Findings") < positions[0]
    for title in ("GPU-job run time: percentiles", "GPU-job queue delay: percentiles", "GPU time by job size"):
        assert title in out
    assert "Philly" in out and "Helios" in out


def test_csv_rows_cover_every_section(capsys, db: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = sacme_run(capsys, db, "--month", "2023-07", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0
    assert {r["section"] for r in rows} == set(SECTIONS)
    by_key = {(r["section"], r["key"]): r["value"] for r in rows}
    _json_code, json_out, _ = sacme_run(capsys, db, "--month", "2023-07", "--format", "json")
    data = json.loads(json_out)
    assert float(by_key[("durations", "overall.run_time.p90")]) == data["durations"]["overall"]["run_time"]["p90"]
    assert float(by_key[("durations", "SFT.queue.cdf.le_1024s.share")]) == data["durations"]["SFT"]["queue"]["cdf"][10]["share"]
    assert by_key[("utilisation", "available")] == "false"


def test_out_and_plots_write_files(capsys, db: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out_file, plots = tmp_path / "r.json", tmp_path / "plots" / "july"
    code, out, _err = sacme_run(capsys, db, "--month", "2023-07", "--format", "json",
                               "--out", str(out_file), "--plots", str(plots))
    assert code == 0 and out == ""
    assert list(json.loads(out_file.read_text())) == list(SECTIONS)
    names = sorted(p.name for p in plots.iterdir())
    assert names == sorted(f"{n}.png" for n in ("workload_share", "gpu_demand", "run_time_cdf",
                                                  "queue_cdf", "scale_cdf", "states"))
    assert all((plots / n).read_bytes().startswith(b"\x89PNG") for n in names)


def test_empty_period_says_so_and_exits_zero(capsys, db: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = sacme_run(capsys, db, "--month", "2020-02")
    assert code == 0
    assert "Empty report: no jobs were submitted in 2020-02" in out
    code, out, _ = sacme_run(capsys, db, "--month", "2020-02", "--format", "json")
    assert code == 0 and json.loads(out)["overview"]["empty"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--month", "2023-7"], "--month '2023-7' is not YYYY-MM"),
        (["--month", "July"], "--month 'July' is not YYYY-MM"),
        (["--month", "2023-13"], "--month '2023-13' is not YYYY-MM"),
        (["--cluster", "nosuch"], "--cluster 'nosuch' has no jobs in the store (known: seren)"),
        (["--type", "Training"], "--type 'Training' is not a workload type"),
        (["--since", "yesterday"], "--since 'yesterday' is not an ISO date"),
        (["--month", "2023-07", "--since", "2023-07-01"], "--month cannot be combined"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, db: str, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = sacme_run(capsys, db, *args)
    assert code == 2 and out == ""
    assert err.startswith("sacme: error: ") and message in err
    assert err.count("\n") == 1


def test_unwritable_out_is_exit_2_before_any_work(capsys, db: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for target, why in ((tmp_path / "missing" / "r.html", "does not exist"), (tmp_path, "is a directory")):
        code, out, err = sacme_run(capsys, db, "--format", "html", "--out", str(target))
        assert code == 2 and out == ""
        assert why in err and err.count("\n") == 1


def test_type_is_case_insensitive_and_filters(capsys, db: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = sacme_run(capsys, db, "--type", "sft", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["overview"]["type"] == "SFT"
    assert data["workload"]["Eval"]["gpu_jobs"] == 0.0 and data["workload"]["SFT"]["gpu_job_share"] == 1.0


def test_non_admin_sees_only_own_jobs() -> None:
    alice = Viewer(name="alice", uid=1001, groups=frozenset({"alice", "users"}))
    assert visible_user(alice, None, group="hpcadmin") == "alice"
    assert visible_user(alice, "alice", group="hpcadmin") == "alice"
    with pytest.raises(InputError, match="admin group 'hpcadmin'"):
        visible_user(alice, "bob", group="hpcadmin")


def test_admin_group_member_and_root_see_everyone() -> None:
    carol = Viewer(name="carol", uid=1002, groups=frozenset({"carol", "hpcadmin"}))
    root = Viewer(name="root", uid=0, groups=frozenset({"root"}))
    assert visible_user(carol, None, group="hpcadmin") is None
    assert visible_user(carol, "bob", group="hpcadmin") == "bob"
    assert visible_user(root, None, group="hpcadmin") is None


def test_since_until_bounds_are_utc_inclusive_exclusive() -> None:
    period = resolve_period(None, "2023-07-01", "2023-07-02T00:00:00+08:00")
    assert period.since_ts == JULY.since_ts
    assert period.until_ts == JULY.since_ts + 16 * 3600
    assert month_period("2023-12").until_ts == resolve_period(None, "2024-01-01", None).since_ts
