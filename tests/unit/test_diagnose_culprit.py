"""The culprit is the node whose rank failed first, never a node that only reported it."""

from __future__ import annotations

from slurm_acme.diagnose import StreamingDiagnoser, diagnose


def test_srun_task_exit_names_the_node_of_an_unprefixed_failure():
    verdict = diagnose([
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "srun: error: node3: task 5: Exited with exit code 1",
        "srun: error: node1: tasks 0-3: Killed",
    ], cases=[])
    assert (verdict.category, verdict.node) == ("CUDAError", "node3")


def test_srun_first_failed_task_not_the_ones_srun_killed():
    verdict = diagnose([
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "srun: error: node1: tasks 0-3: Terminated",
        "srun: error: node4: task 6: Exited with exit code 1",
    ], cases=[])
    assert verdict.node == "node4"


def test_srun_exit_lines_map_a_rank_prefix_to_its_node():
    verdict = diagnose([
        "[rank6]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "srun: error: node1: tasks 0-3: Exited with exit code 1",
        "srun: error: node2: tasks 4-7: Exited with exit code 1",
    ], cases=[])
    assert verdict.node == "node2"


def test_task_layout_maps_the_failing_rank_to_its_node():
    layout = {0: "gpu-a1", 1: "gpu-a1", 2: "gpu-b7", 3: "gpu-b7"}
    verdict = diagnose([
        "[rank0]:[E321 02:17:08.408 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout",
        "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ], cases=[], task_nodes=layout)
    assert (verdict.category, verdict.node, verdict.action) == ("ECCError", "gpu-b7", "requeue_exclude_node")


def test_streaming_diagnoser_takes_the_layout_too():
    live = StreamingDiagnoser(retrieval=False, task_nodes={4: "n9"})
    live.feed("4: RuntimeError: CUDA error: misaligned address")
    assert live.result().node == "n9"


def test_survivors_reporting_a_dead_peer_implicate_no_node():
    verdict = diagnose([
        "node1:100:200 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.7<4242> with error 12",
        "[rank0]:[E321 02:17:08.408 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout",
    ], cases=[], task_nodes={0: "node1"})
    assert verdict.node is None


def test_a_peer_reporting_rank_that_srun_says_failed_first_is_the_culprit():
    # The local cluster's NCCL test job: rank 1 logs a peer-side IB error and
    # raises; rank 0 finishes. srun names rank 1's task as the one that failed.
    lines = [
        "1: node2:18363:18370 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.2<53249> with error 12, opcode 0, len 0, vendor err 129",
        "1: RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled system error, NCCL version 2.14.3",
        "srun: error: node2: task 1: Exited with exit code 1",
    ]
    verdict = diagnose(lines, cases=[])
    assert (verdict.category, verdict.node, verdict.action) == ("NetworkError", "node2", "requeue_exclude_node")


def test_a_survivor_reporting_a_peer_is_not_blamed_when_the_peer_failed_first():
    verdict = diagnose([
        "0: node1:100:200 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.7<4242> with error 12",
        "srun: error: node2: task 1: Segmentation fault",
        "srun: error: node1: task 0: Exited with exit code 1",
    ], cases=[])
    assert verdict.node != "node1"


def test_watchdog_timeouts_alone_implicate_no_node():
    verdict = diagnose([
        "[rank0]:[E321 02:17:08.408 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout",
        "srun: error: node1: task 0: Exited with exit code 1",
    ], cases=[], task_nodes={0: "node1"})
    assert (verdict.category, verdict.node) == ("NCCLTimeoutError", None)


def test_the_batch_host_announcing_a_node_failure_is_not_the_failed_node():
    verdict = diagnose([
        "slurmstepd: error: *** JOB 4242 ON node1 CANCELLED AT 2024-05-01T10:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    ], cases=[])
    assert (verdict.category, verdict.node) == ("NodeFailure", None)
    named = diagnose(["srun: error: Node failure on node7",
                      "slurmstepd: error: *** JOB 4242 ON node1 CANCELLED AT 2024-05-01T10:00:00 DUE TO NODE FAILURE ***"],
                     cases=[])
    assert named.node == "node7"


def test_time_limit_implicates_no_node():
    verdict = diagnose(["slurmstepd: error: *** JOB 77 ON node3 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***"],
                       cases=[])
    assert (verdict.category, verdict.node) == ("SlurmTimeLimit", None)


def test_kernel_xid_line_names_its_host():
    verdict = diagnose(["Mar 21 02:07:08 gpu-node12 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."],
                       cases=[])
    assert (verdict.category, verdict.node) == ("NodeFailure", "gpu-node12")


def test_srun_torchrun_root_cause_block_follows_its_agent_not_srun_task_of_the_same_number():
    # srun -l torchrun, one agent per node: torch's global rank 0 ran under srun
    # task 1 (node2). Task 0's survivor logs a timestamped TCPStore warning later.
    lines = [
        "1: step 11 loss 10.6699",
        "1: RuntimeError: NCCL error: unhandled system error, NCCL version 2.21.5",
        "1: E1201 14:23:29.276000 6085 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9)",
        "1: Root Cause (first observed failure):",
        "1: [0]:",
        "1:   time      : 2026-12-01_14:23:29",
        "1:   host      : localhost",
        "1:   rank      : 0 (local_rank: 0)",
        "1:   exitcode  : -9 (pid: 6317)  (SIGKILL)",
        "1: =====================================================",
        "0: [W1201 14:23:31.772546841 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on SocketImpl(fd=3): "
        "Failed to recv, got 0 bytes. Connection was likely closed.",
    ]
    verdict = diagnose(lines, cases=[], task_nodes={0: "node1", 1: "node2"})
    assert (verdict.category, verdict.node) == ("NetworkError", "node2")


def test_the_supervisors_labelled_feed_keys_the_root_cause_block_by_its_task():
    """The supervisor strips srun's labels and passes the task as ``rank``."""
    live = StreamingDiagnoser(retrieval=False, task_nodes={0: "node1", 1: "node2"})
    for task, line in [
        (1, "RuntimeError: NCCL error: unhandled system error, NCCL version 2.21.5"),
        (1, "Root Cause (first observed failure):"), (1, "[0]:"), (1, "  host      : localhost"),
        (1, "  rank      : 0 (local_rank: 0)"), (1, "  exitcode  : -9 (pid: 6317)  (SIGKILL)"),
        (1, "====================================================="),
        (0, "[W1201 14:23:31.772546841 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on SocketImpl(fd=3): "
            "Failed to recv, got 0 bytes. Connection was likely closed."),
    ]:
        live.feed(line, rank=task)
    verdict = live.result()
    assert (verdict.category, verdict.node) == ("NetworkError", "node2")


def test_under_torchrun_the_supervisor_passes_nodes_and_the_block_follows_its_node():
    """torchrun's agents are not ranks: the supervisor passes each line's node only."""
    live = StreamingDiagnoser(retrieval=False)
    for node, line in [
        ("node2", "RuntimeError: NCCL error: unhandled system error, NCCL version 2.21.5"),
        ("node1", "[rank1]: RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer."),
        ("node2", "Root Cause (first observed failure):"), ("node2", "[0]:"), ("node2", "  host      : localhost"),
        ("node2", "  rank      : 0 (local_rank: 0)"), ("node2", "  exitcode  : -9 (pid: 6317)  (SIGKILL)"),
        ("node2", "====================================================="),
        ("node1", "[W1201 14:23:31.772546841 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on SocketImpl(fd=3): "
                  "Failed to recv, got 0 bytes. Connection was likely closed."),
    ]:
        live.feed(line, node=node)
    verdict = live.result()
    assert (verdict.category, verdict.node) == ("NetworkError", "node2")
