"""The training step's shape: srun tasks or one torchrun agent per node, and its port."""

from __future__ import annotations

import pytest

from slurm_acme.ft import launch
from slurm_acme.ft.spec import parse_spec


def spec(extra: str = "", command: str = "[python, train.py]"):  # type: ignore[no-untyped-def]
    return parse_spec(f"name: t\nnodes: 2\nntasks_per_node: 4\ncommand: {command}\n"
                      f"checkpoint: {{dir: c}}\n{extra}", "t.yaml")


def test_srun_launch_runs_the_command_in_every_task_with_a_rank_layout() -> None:
    argv = launch.srun_argv(spec(), ["node1", "node2"])
    assert argv[0] == "srun" and "--ntasks-per-node=4" in argv and "--ntasks=8" in argv
    assert "--nodelist=node1,node2" in argv and "--kill-on-bad-exit=1" in argv
    assert argv[-2:] == ("python", "train.py")
    step = launch.Launch(argv=argv, env={}, nodes=("node1", "node2"), tasks_per_node=4)
    assert step.task_nodes() == {0: "node1", 3: "node1", 4: "node2", 7: "node2"} | {
        1: "node1", 2: "node1", 5: "node2", 6: "node2"}


def test_torchrun_launch_is_one_agent_per_node_with_c10d_rendezvous() -> None:
    s = spec("launch: torchrun\ntorchrun: [/venv/bin/torchrun]\n", command="[train.py, --lr, '1e-4']")
    argv = launch.srun_argv(s, ["node1", "node2"], endpoint="10.0.0.1:29400", run_id="r-0")
    assert "--ntasks-per-node=1" in argv and "--ntasks=2" in argv
    tail = list(argv[argv.index("/venv/bin/torchrun"):])
    assert tail == ["/venv/bin/torchrun", "--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                    "--rdzv-endpoint=10.0.0.1:29400", "--rdzv-id=r-0", "--max-restarts=0",
                    "train.py", "--lr", "1e-4"]
    step = launch.Launch(argv=argv, env={}, nodes=("node1", "node2"), tasks_per_node=1,
                         task_is_rank=False)
    assert step.node_of_task(1) == "node2" and step.task_nodes() is None


def test_torchrun_runs_a_non_script_command_as_given() -> None:
    s = spec("launch: torchrun\ntorchrun: [torchrun]\n", command="[python, -u, train.py]")
    argv = launch.torchrun_argv(s, ["n1"], endpoint="a:1", run_id="r")
    assert argv[-4:] == ["--no-python", "python", "-u", "train.py"]


def test_torchrun_is_found_beside_the_commands_python(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "python3").write_text("")
    (tmp_path / "torchrun").write_text("")
    s = spec("launch: torchrun\n", command=f"[{tmp_path / 'python3'}, train.py]")
    assert launch.torchrun_command(s, {"PATH": "/nonexistent"}) == [str(tmp_path / "torchrun")]


def test_the_port_is_picked_free_on_the_master_and_never_twice() -> None:
    probed = []
    here = [launch.rendezvous_port("node1", here="node1", job_id="7") for _ in range(3)]
    assert len(set(here)) == 3 and all(1024 < p < 65536 for p in here)
    remote = launch.rendezvous_port("node2", here="node1", job_id="7",
                                    probe=lambda job, node: probed.append((job, node)) or 4242)
    assert remote == 4242 and probed == [("7", "node2")]


@pytest.mark.parametrize("resume,step", [(None, None), ("/c/step-5", 5)])
def test_resume_variables_are_set_together_or_not_at_all(resume, step) -> None:  # type: ignore[no-untyped-def]
    env = launch.training_env(spec(), base={"ACME_RESUME_FROM": "/stale", "ACME_RESUME_STEP": "1"},
                              ckpt_dir="/c", resume_from=resume, resume_step=step, skip_steps="",
                              metrics_file="/m", master_addr="a", port=1, run_id="r", attempt=0)
    assert env.get("ACME_RESUME_FROM") == resume
    assert env.get("ACME_RESUME_STEP") == (str(step) if step else None)
