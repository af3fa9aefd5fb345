"""Scenario 7: malformed train.yaml files fail in one line, exit 2, and submit nothing."""

from __future__ import annotations

import pytest
from test_ft_support import fresh_dir, sacme, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _queue_names(slurm) -> set[str]:  # type: ignore[no-untyped-def]
    return {job.name for job in slurm.squeue()}


@pytest.mark.parametrize("case,edit,expected", [
    ("bad-yaml", lambda text: text + "nodes: [2\n", "not valid YAML"),
    ("unknown-key", lambda text: text + "gpus: 8\n", "unknown field 'gpus' (valid: name, nodes,"),
    ("negative-nodes", lambda text: text.replace("nodes: 2", "nodes: -2"), "field 'nodes'"),
    ("too-many-nodes", lambda text: text.replace("nodes: 2", "nodes: 64"),
     "field 'nodes': 64 nodes requested but the cluster has 4"),
])
def test_malformed_spec_is_one_line_exit_2_and_nothing_submitted(
        slurm_cluster, slurm, case, edit, expected) -> None:  # type: ignore[no-untyped-def]
    tmp_path, sqlite_url = fresh_dir("ft-bad-spec")
    spec = write_spec(tmp_path, f"ft-bad-{case}")
    spec.write_text(edit(spec.read_text()))
    before = _queue_names(slurm)
    proc = sacme(sqlite_url, "submit", str(spec), check=False, cwd=tmp_path)

    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"sacme: error: {spec}")
    assert expected in lines[0]
    assert "Traceback" not in proc.stderr
    assert f"ft-bad-{case}" not in _queue_names(slurm) - before
    status = sacme(sqlite_url, "status", check=False)
    # A read command creates no store where the refused submit made none.
    assert status.returncode == 2 and ("no runs" in status.stderr or "does not exist" in status.stderr)
    assert not (tmp_path / "acme-runs").exists()
