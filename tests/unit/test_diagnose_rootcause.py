"""Ordering: specific before generic, strengths, and the incident window."""

from __future__ import annotations

import pytest

from slurm_acme.diagnose import diagnose


@pytest.mark.parametrize(
    ("line", "category", "origin"),
    [
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "ECCError", "infrastructure"),
        ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", "NodeFailure", "infrastructure"),
        ("NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, An uncorrectable double bit error (DBE) has been detected", "ECCError", "infrastructure"),
        ("NVRM: Xid (PCI:0000:3b:00): 74, pid=1234, NVLink: fatal error detected on link 3", "NVLinkError", "infrastructure"),
        ("NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, Ch 00000010, MMU Fault", "CUDAError", "infrastructure"),
        ("RuntimeError: CUDA error: device-side assert triggered", "CUDADeviceAssert", "script"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "CUDAError", "infrastructure"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "OutOfMemoryError", "framework"),
        ("RuntimeError: DataLoader worker (pid 77) is killed by signal: Killed.", "DataloaderKilled", "framework"),
        ("OSError: [Errno 28] No space left on device", "StorageError", "infrastructure"),
        ("ModuleNotFoundError: No module named 'apex'", "ModuleNotFoundError", "script"),
        ("slurmstepd: error: *** JOB 77 ON node1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***", "SlurmTimeLimit", "infrastructure"),
        ("torch.distributed.DistNetworkError: Connection refused to node1:29500", "ConnectionError", "infrastructure"),
    ],
)
def test_mechanism_rules(line, category, origin):
    verdict = diagnose([line], cases=[])
    assert (verdict.category, verdict.origin) == (category, origin)


def test_device_assertion_hint_after_an_ecc_error_is_not_a_device_assert():
    verdict = diagnose([
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ])
    assert verdict.category == "ECCError"


def test_detail_lines_right_after_a_generic_nccl_error_refine_it():
    verdict = diagnose([
        "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:93, unhandled cuda error, NCCL version 2.29.3",
        "Last error:",
        "Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152",
    ])
    assert verdict.category == "NVLinkError"


def test_routine_fp16_overflow_early_does_not_hide_a_later_nan():
    lines = ["[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"]
    lines += [f"iteration {i} | lm loss: 2.{i} | grad norm: 0.5 |" for i in range(100)]
    lines += ["iteration 101 | lm loss: nan | grad norm: nan |"]
    verdict = diagnose(lines)
    assert (verdict.category, verdict.action) == ("LossNaN", "rollback")


def test_a_real_error_beats_routine_overflow_warnings():
    verdict = diagnose([
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768",
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/shard_7.bin'",
    ])
    assert verdict.category == "FileNotFoundError"


def test_nccl_info_chatter_is_never_evidence():
    verdict = diagnose([
        "node1:100:100 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory",
    ], cases=[])
    assert verdict.is_unknown


def test_start_up_warnings_that_mention_errors_do_not_hide_the_real_failure():
    verdict = diagnose([
        "node1:11:11 [0] NCCL WARN NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file",
        ("W dso_loader.cc:64] Could not load dynamic library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: "
        "cannot open shared object file: No such file or directory"),
        "/opt/x/torch/cuda/__init__.py:88: UserWarning: CUDA initialization: CUDA driver initialization failed",
        "KeyError: 'tokens'",
    ])
    assert verdict.category == "KeyError"
