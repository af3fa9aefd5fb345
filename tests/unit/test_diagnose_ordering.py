"""Time order decides the root cause; rule order only names a line."""

from __future__ import annotations

import pytest

from slurm_acme.diagnose import StreamingDiagnoser, diagnose


def verdict_of(lines):
    return diagnose(lines, cases=[])


def test_an_earlier_fallen_off_the_bus_beats_a_later_ecc_line():
    verdict = verdict_of([
        "[rank2]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        "[rank2]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ])
    assert verdict.category == "NodeFailure"


def test_busy_devices_after_an_unspecified_launch_failure_is_a_cuda_error():
    verdict = verdict_of([
        "[rank1]: RuntimeError: CUDA error: unspecified launch failure",
        "[rank1]: RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable",
    ])
    assert verdict.category == "CUDAError"


def test_a_rendezvous_error_before_no_route_to_host_is_a_connection_error():
    verdict = verdict_of([
        "torch.distributed.DistNetworkError: The client socket has timed out after 900000ms while trying to connect to (node1, 29500).",
        "node2:77:77 [0] NCCL WARN socket connect to 10.1.1.1<29500> failed: No route to host",
    ])
    assert (verdict.category, verdict.origin) == ("ConnectionError", "infrastructure")


def test_timestamps_beat_the_order_lines_arrived_in():
    """Per-rank logs concatenated: rank 1's file comes second but failed first."""
    verdict = verdict_of([
        "[2024-05-01 10:00:09,100] [rank0] RuntimeError: CUDA error: an illegal memory access was encountered",
        "[2024-05-01 10:00:02,500] [rank1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ])
    assert verdict.category == "OutOfMemoryError"


def test_glog_timestamps_order_torch_lines():
    verdict = verdict_of([
        "[rank3]:[E321 02:07:09.408271257 ProcessGroupNCCL.cpp:1275] NCCL WARN NET/IB : ibv_poll_cq failed",
        "[rank5]:[E321 02:07:08.100000000 ProcessGroupNCCL.cpp:607] RuntimeError: CUDA error: an illegal memory access was encountered",
    ])
    assert verdict.category == "CUDAError"


def test_without_timestamps_line_order_decides():
    verdict = verdict_of([
        "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "[2024-05-01 10:00:02,500] [rank1] torch.OutOfMemoryError: CUDA out of memory.",
    ])
    assert verdict.category == "CUDAError"


def test_survivors_watchdog_timeouts_never_outrank_the_first_error_even_when_earlier_in_file():
    verdict = verdict_of([
        ("[rank0]:[E321 02:17:08.408 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
         "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600013 milliseconds before timing out."),
        "[rank3]: KeyError: 'input_ids'",
    ])
    assert (verdict.category, verdict.origin, verdict.action) == ("KeyError", "script", "stop")


def test_killed_after_a_nccl_abort_is_the_abort():
    verdict = verdict_of([
        "[rank1]:[E321 02:17:08.408 ProcessGroupNCCL.cpp:1182] [Rank 1] NCCL communicator was aborted on rank 1.",
        "srun: error: node2: task 1: Killed",
        "Killed",
    ])
    assert verdict.category == "NCCLTimeoutError"


def test_a_cause_split_over_two_lines_is_found():
    verdict = verdict_of([
        "[W socket.cpp:601] [c10d] The client socket cannot be initialized to connect to [node1]:29500.",
        "Traceback (most recent call last):",
        '  File "torch/distributed/rendezvous.py", line 185, in _create_c10d_store',
        "    return TCPStore(",
        "RuntimeError: connect() timed out. Original timeout was 60000 ms.",
    ])
    assert (verdict.category, verdict.rule_id) == ("ConnectionError", "store-connect-timeout")
    assert verdict.evidence[:2] == ("    return TCPStore(", "RuntimeError: connect() timed out. Original timeout was 60000 ms.")


def test_the_second_line_alone_is_not_that_rule():
    verdict = verdict_of(["RuntimeError: connect() timed out. Original timeout was 60000 ms."])
    assert verdict.rule_id != "store-connect-timeout"


def test_multi_line_rules_work_when_lines_are_fed_one_by_one():
    live = StreamingDiagnoser(retrieval=False)
    live.feed("    store = TCPStore(master_addr, port)", rank=2)
    live.feed("RuntimeError: connect() timed out. Original timeout was 60000 ms.", rank=2)
    assert live.result().rule_id == "store-connect-timeout"


def test_a_line_from_another_rank_does_not_complete_a_multi_line_rule():
    live = StreamingDiagnoser(retrieval=False)
    live.feed("    store = TCPStore(master_addr, port)", rank=2)
    live.feed("RuntimeError: connect() timed out. Original timeout was 60000 ms.", rank=5)
    assert live.result().rule_id != "store-connect-timeout"


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable", "NodeFailure"),
        ("Test CUDA failure common.cu:891 'out of memory'", "OutOfMemoryError"),
        ("2024-05-01 10:00:00 ERROR cuda failed with error 2 out of memory", "OutOfMemoryError"),
        ("NVRM: GPU 0000:3b:00.0: RmInitAdapter: returned NV_ERR_RESET_REQUIRED", "NodeFailure"),
        ("/var/spool/slurmd/job42/slurm_script: 行 12: 31337 已杀死               python train.py", "HostMemoryKilled"),
        ("已杀死", "HostMemoryKilled"),
        ("**Killed**", "HostMemoryKilled"),
        ("> `Killed`", "HostMemoryKilled"),
        ("Remapping Failure Occurred        : Yes", "ECCError"),
    ],
)
def test_wording_variants(line, category):
    assert verdict_of([line]).category == category


def test_remapped_rows_without_a_failure_are_not_an_ecc_error():
    assert verdict_of(["    Remapped Rows", "        Remapping Failure Occurred        : No"]).is_unknown


def test_root_cause_block_lines_belong_to_its_rank_whatever_relayed_them():
    """torchelastic numbers the failed rank 0; srun relays the block as task 5."""
    verdict = verdict_of([
        "0: [2024-05-01 00:00:01,000] [INFO] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4, reducing to 2",
        "5: Root Cause (first observed failure):",
        "5: [0]:",
        "5:   host      : worker-3",
        "5:   rank      : 0 (local_rank: 0)",
        "5:   exitcode  : -9 (pid: 14750)",
        "5:   traceback : Signal 9 (SIGKILL) received by PID 14750",
    ])
    assert verdict.category == "HostMemoryKilled"
