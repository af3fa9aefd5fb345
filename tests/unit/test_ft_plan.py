"""The frozen submit plan: sbatch argv and a script whose values are all shell-quoted."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from slurm_acme.errors import InputError
from slurm_acme.ft.plan import build_plan
from slurm_acme.ft.spec import parse_spec
from slurm_acme.ft.submitter import check_fits
from slurm_acme.slurm import NodeInfo

SPEC = """\
name: tiny
nodes: 2
time: "00:10:00"
command: [python, train.py]
checkpoint: {dir: ckpt}
fault_tolerance: {signal_lead: 30}
"""


def plan_for(text: str = SPEC, **kw):  # type: ignore[no-untyped-def]
    return build_plan(parse_spec(text, "t.yaml"), spec_path="t.yaml",
                      db_url=kw.pop("db_url", "sqlite:////tmp/a.db"), run_id="r1",
                      python="/usr/bin/python3", cwd=kw.pop("cwd", "/tmp"), **kw)


def test_sbatch_argv_has_requeue_usr2_signal_and_pretrain_comment() -> None:
    argv = plan_for().sbatch_argv
    assert argv[:2] == ("sbatch", "--parsable")
    assert "--requeue" in argv
    assert "--signal=B:USR2@30" in argv
    assert "--comment=acme:type=pretrain acme:run=r1" in argv
    assert "--nodes=2" in argv and "--time=00:10:00" in argv


def test_script_execs_the_supervisor_for_the_run() -> None:
    script = plan_for().script
    assert script.startswith("#!/bin/bash\n")
    assert script.rstrip().endswith("exec /usr/bin/python3 -m slurm_acme supervise r1")


@pytest.mark.parametrize("hostile", ["a b", "a'; echo x", 'a"=0"', "$(touch /tmp/pwned)"])
def test_hostile_values_survive_the_shell_verbatim(tmp_path, hostile: str) -> None:  # type: ignore[no-untyped-def]
    plan = plan_for(db_url=f"sqlite:///{hostile}", cwd=str(tmp_path))
    # run the export lines in a real shell and read the values back
    exports = "\n".join(line for line in plan.script.splitlines() if line.startswith("export "))
    out = subprocess.run(["bash", "-c", exports + '\nprintf %s "$ACME_DB"'],
                         capture_output=True, text=True, check=True).stdout
    assert out == f"sqlite:///{hostile}"


def test_hostile_job_name_stays_one_argv_element() -> None:
    plan = plan_for(SPEC.replace("name: tiny", "name: \"x'; rm -rf / #\""))
    assert "--job-name=x'; rm -rf / #" in plan.sbatch_argv
    assert shlex.split(plan.render().splitlines()[2]) == list(plan.sbatch_argv)


def test_dry_run_render_shows_argv_and_script() -> None:
    text = plan_for().render()
    assert "sbatch --parsable" in text and "exec /usr/bin/python3" in text


def test_plan_is_frozen() -> None:
    plan = plan_for()
    with pytest.raises(AttributeError):
        plan.script = "x"  # type: ignore[misc]


def _nodes(n: int) -> list[NodeInfo]:
    return [NodeInfo(f"node{i}", "idle") for i in range(1, n + 1)]


def test_more_nodes_than_cluster_is_rejected() -> None:
    with pytest.raises(InputError, match=r"field 'nodes': 5 nodes requested but the cluster has 4"):
        check_fits(plan_for(SPEC.replace("nodes: 2", "nodes: 5")), _nodes(4))


def test_exclusions_count_against_the_cluster() -> None:
    spec = SPEC.replace("nodes: 2", "nodes: 4").replace("{signal_lead: 30}", "{exclude: [node1]}")
    with pytest.raises(InputError, match="after excluding 1"):
        check_fits(plan_for(spec), _nodes(4))


def test_unknown_excluded_node_is_rejected() -> None:
    spec = SPEC.replace("{signal_lead: 30}", "{exclude: [gpu99]}")
    with pytest.raises(InputError, match="unknown node"):
        check_fits(plan_for(spec), _nodes(4))


def test_fitting_spec_passes() -> None:
    check_fits(plan_for(), _nodes(4))


def test_sbatch_passthrough_is_rendered_as_argv_words() -> None:
    plan = plan_for(SPEC + "sbatch: {mem: 64G, constraint: \"a100&ib'; echo x\", exclusive: true, oversubscribe: false}\n")
    argv = plan.sbatch_argv
    assert "--mem=64G" in argv and "--exclusive" in argv
    assert "--constraint=a100&ib'; echo x" in argv  # one word, never through a shell
    assert not any(a.startswith("--oversubscribe") for a in argv)
    assert shlex.split(plan.render().splitlines()[2]) == list(argv)


SPARES = SPEC.replace("{signal_lead: 30}", "{signal_lead: 30, spares: 1}")


def test_spares_allocate_extra_nodes_and_train_on_nodes() -> None:
    plan = plan_for(SPARES)
    assert "--nodes=3" in plan.sbatch_argv
    # the training step runs on `nodes` of them, named by --nodelist
    assert "--nodes=2" in plan.training_step
    assert "--nodelist=<node1>,<node2>" in plan.training_step


def test_dry_run_shows_the_split_of_training_nodes_and_spares() -> None:
    text = plan_for(SPARES).render()
    assert "3 node(s) allocated: 2 training, 1 spare(s) idle" in text
    assert "no spares" in plan_for().render()


def test_spares_count_against_the_cluster() -> None:
    with pytest.raises(InputError, match=r"field 'fault_tolerance.spares': 2 nodes \+ 3 spare"):
        check_fits(plan_for(SPARES.replace("spares: 1", "spares: 3")), _nodes(4))
    check_fits(plan_for(SPARES.replace("spares: 1", "spares: 2")), _nodes(4))
