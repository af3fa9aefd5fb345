"""srun steps through the door: the argv a request becomes, and how steps launch.

Launch tests put a fake ``srun`` on PATH that prints each argument it received
on its own line, so what srun would see is checked word for word.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurm_acme.errors import InputError
from slurm_acme.slurm import (
    Slurm,
    SlurmUnavailable,
    StepRequest,
    parse,
    run_step,
    sbatch_argv,
    start_step,
    step_argv,
)
from slurm_acme.slurm.steps import SRUN_INPUT_VARS, step_env

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HOSTILE = ["a b", "a'; echo x", 'a"=0"', "$(touch /tmp/acme-pwned)", "--jobid=1"]


@pytest.fixture
def fake_srun(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    srun = bindir / "srun"
    srun.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n'
                    'echo "SLURM_NTASKS=${SLURM_NTASKS-unset}" >&2\nexit "${FAKE_SRUN_RC:-0}"\n')
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return srun


def test_a_bare_request_is_just_srun_and_the_command() -> None:
    assert step_argv(StepRequest(), ["hostname"]) == ["srun", "hostname"]


def test_a_step_inside_an_allocation_joins_it_and_overlaps_first() -> None:
    argv = step_argv(StepRequest(job_id="42", overlap=True, nodes=2, nodelist=("node1", "node2"),
                                 ntasks=16, ntasks_per_node=8, cpus_per_task=1, overcommit=True,
                                 mem="0", kill_on_bad_exit=True, export="ALL", quiet=True,
                                 gpus_per_node=4), ["/py", "-m", "w"])
    assert argv == ["srun", "--jobid=42", "--overlap", "--nodes=2", "--nodelist=node1,node2",
                    "--ntasks=16", "--ntasks-per-node=8", "--cpus-per-task=1", "--overcommit",
                    "--mem=0", "--gpus-per-node=4", "--kill-on-bad-exit=1", "--export=ALL", "--quiet",
                    "/py", "-m", "w"]


def test_an_exact_gres_step_as_evaluation_trials_use() -> None:
    argv = step_argv(StepRequest(exact=True, nodes=1, ntasks=1, gres="gpu:1", cpus_per_task=1), ["t"])
    assert argv == ["srun", "--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--exact", "--gres=gpu:1", "t"]


def test_a_standalone_step_names_itself_and_sets_a_time_limit_and_extra_words_come_last() -> None:
    argv = step_argv(StepRequest(time_limit="3", job_name="acme-health", label=True,
                                 extra=("--mpi=pmix",)), ["x"])
    assert argv == ["srun", "--time=3", "--job-name=acme-health", "--label", "--mpi=pmix", "x"]


def test_a_training_step_labels_and_unbuffers_its_output() -> None:
    argv = step_argv(StepRequest(nodes=2, ntasks=16, ntasks_per_node=8, label=True, unbuffered=True,
                                 kill_on_bad_exit=True, export="ALL"), ["python", "train.py"])
    assert argv == ["srun", "--nodes=2", "--ntasks=16", "--ntasks-per-node=8", "--kill-on-bad-exit=1",
                    "--export=ALL", "--label", "--unbuffered", "python", "train.py"]


def test_zero_gpus_per_node_asks_for_none() -> None:
    assert not any("gpus" in a for a in step_argv(StepRequest(gpus_per_node=0), ["x"]))


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_job_names_and_commands_stay_single_words(value: str) -> None:
    argv = step_argv(StepRequest(job_name=value), [value, "--flag", value])
    assert argv == ["srun", f"--job-name={value}", value, "--flag", value]


@pytest.mark.parametrize("bad", ["a b", "n1,n2", "", "x\ny"])
def test_node_names_that_would_change_the_node_list_are_refused(bad: str) -> None:
    with pytest.raises(InputError, match="nodelist"):
        StepRequest(nodelist=("node1", bad))


@pytest.mark.parametrize("bad", ["a'; echo x", "12 13", "", "--overlap", "7\n"])
def test_job_ids_must_be_slurm_job_ids(bad: str) -> None:
    with pytest.raises(InputError, match="job id"):
        StepRequest(job_id=bad)


def test_array_and_het_job_ids_are_accepted() -> None:
    assert step_argv(StepRequest(job_id="12_3"), ["x"])[1] == "--jobid=12_3"
    assert step_argv(StepRequest(job_id="12+1"), ["x"])[1] == "--jobid=12+1"


@pytest.mark.parametrize("field,value", [("ntasks", 0), ("nodes", -1), ("cpus_per_task", "2"),
                                         ("gpus_per_node", -1), ("mem", "1G\n--x"), ("gres", "")])
def test_nonsense_shapes_are_refused_with_the_field_named(field: str, value: object) -> None:
    with pytest.raises(InputError, match=field):
        StepRequest(**{field: value})


def test_extra_words_must_be_options_and_the_command_must_not_be_empty() -> None:
    with pytest.raises(InputError, match="extra"):
        StepRequest(extra=("rm -rf /",))
    with pytest.raises(InputError, match="command"):
        step_argv(StepRequest(), [])


def test_a_request_is_frozen() -> None:
    with pytest.raises(AttributeError):
        StepRequest().ntasks = 3  # type: ignore[misc]


def test_step_env_drops_the_batch_scripts_shape_but_keeps_the_rest() -> None:
    env = step_env({"SLURM_NTASKS": "4", "SLURM_NODELIST": "n1", "SLURM_JOB_ID": "7", "PATH": "/bin"})
    assert env == {"SLURM_JOB_ID": "7", "PATH": "/bin"}
    assert "SLURM_JOB_ID" not in SRUN_INPUT_VARS


@pytest.mark.parametrize("value", HOSTILE)
def test_start_step_hands_srun_each_word_untouched(fake_srun, value: str) -> None:
    proc = start_step(StepRequest(job_name=value, ntasks=1), ["cmd", value],
                      env=step_env({**os.environ, "SLURM_NTASKS": "9"}),
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert out.splitlines() == [f"--job-name={value}", "--ntasks=1", "cmd", value]
    assert "SLURM_NTASKS=unset" in err
    assert not Path("/tmp/acme-pwned").exists()


def test_start_step_streams_lines_with_undecodable_bytes_replaced(tmp_path, monkeypatch) -> None:
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\nprintf 'ok\\n\\377\\n'\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    proc = start_step(StepRequest(), ["x"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                      stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1)
    out, _ = proc.communicate(timeout=10)
    assert out.splitlines() == ["ok", "\ufffd"]


def test_run_step_returns_output_even_when_the_step_fails(fake_srun) -> None:
    result = run_step(StepRequest(nodes=1), ["x"], timeout=10,
                      env={**os.environ, "FAKE_SRUN_RC": "3"})
    assert (result.returncode, result.timed_out) == (3, False)
    assert result.stdout.splitlines() == ["--nodes=1", "x"]
    assert result.argv == ("srun", "--nodes=1", "x")


def test_run_step_past_its_timeout_keeps_what_was_printed(tmp_path, monkeypatch) -> None:
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\necho started\nexec sleep 30\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    result = run_step(StepRequest(), ["x"], timeout=1)
    assert result.timed_out and result.returncode is None
    assert result.stdout.strip() == "started"


def test_a_missing_srun_is_slurm_unavailable(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmUnavailable, match="srun"):
        start_step(StepRequest(), ["x"])
    with pytest.raises(SlurmUnavailable, match="srun"):
        run_step(StepRequest(), ["x"], timeout=5)


# ---------------------------------------------- door helpers these callers need

def test_sbatch_argv_is_what_sbatch_runs_with_the_dependency_last() -> None:
    assert sbatch_argv(["--job-name=a b"], "afterok:1") == [
        "sbatch", "--parsable", "--job-name=a b", "--dependency=afterok:1"]
    calls = []

    def runner(argv, *, timeout, env=None, stdin=None):
        calls.append(argv)
        return "17\n"

    assert Slurm(runner=runner).sbatch(["--job-name=a'; echo x"], "#!/bin/sh\n") == "17"
    assert calls == [sbatch_argv(["--job-name=a'; echo x"])]


def test_gpus_on_one_node_come_from_one_scontrol_call() -> None:
    text = (FIXTURES / "telemetry" / "scontrol_d_o_show_job_22.05.txt").read_text()
    calls = []

    def runner(argv, *, timeout, env=None, stdin=None):
        calls.append(argv)
        return text

    slurm = Slurm(runner=runner)
    assert slurm.job_gpus_on_node("5", "node2") == (0, 1, 2)
    assert slurm.job_gpus_on_node("5", "node3") is None
    assert calls == [["scontrol", "-d", "-o", "show", "job", "5"]] * 2


def test_gpu_indices_with_type_ranges_and_padded_hostlists() -> None:
    text = "JobId=9 Nodes=gpu[07-08] CPU_IDs=0-3 Mem=0 GRES=gpu:a100:3(IDX:0,2-3) Foo=1"
    assert parse.gpu_indices_on(text, "gpu08") == (0, 2, 3)
    assert parse.gpu_indices_on(text, "gpu8") is None
    assert parse.expand_hostlist("n[1-2,05],login") == ["n1", "n2", "n05", "login"]


def test_node_addresses_leave_out_nodes_without_one() -> None:
    text = ("NodeName=node1 Arch=x86_64 NodeAddr=127.0.0.1 NodeHostName=localhost\n"
            "NodeName=node2 Arch=x86_64 NodeHostName=n2\n")
    calls = []

    def runner(argv, *, timeout, env=None, stdin=None):
        calls.append(argv)
        return text

    assert Slurm(runner=runner).node_addresses(["node1", "node2"]) == {"node1": "127.0.0.1"}
    assert calls == [["scontrol", "show", "node", "-o", "node1,node2"]]
