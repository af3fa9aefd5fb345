"""A fake pynvml module: the boundary the NVML sampler talks to, with two GPUs.

Shared by the sampler unit tests and the node-health tests (unit and
integration), so every test drives the same API subset the real module has.
"""

from __future__ import annotations

from types import SimpleNamespace


class FakeNVMLError(Exception):
    def __init__(self, message: str = "", value: int | None = None) -> None:
        super().__init__(message)
        self.value = value


class FakeNvml:
    """The subset of nvidia-ml-py's module API the sampler calls, with two GPUs."""

    NVMLError = FakeNVMLError
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_TEMPERATURE_GPU = 0
    NVML_ERROR_GPU_IS_LOST = 15
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, power_mw=(250_000, 4294967295), minors=(2, 5), events=True):
        self.power_mw = power_mw
        self.minors = minors
        self.events = events
        self.pending_xids: list[tuple[int, int]] = []
        self.dbe = [2, None]  # None: the counter is not supported on that GPU
        self.remap_failure = [False, False]
        self.lost: set[int] = set()
        self.shutdown = False

    def _alive(self, h):
        if h.i in self.lost:
            raise FakeNVMLError("GPU is lost", value=self.NVML_ERROR_GPU_IS_LOST)

    def nvmlInit(self): pass
    def nvmlShutdown(self): self.shutdown = True
    def nvmlDeviceGetCount(self): return 2
    def nvmlDeviceGetHandleByIndex(self, i): return SimpleNamespace(i=i)
    def nvmlDeviceGetUUID(self, h): return f"GPU-fake-{h.i}".encode()
    def nvmlDeviceGetMinorNumber(self, h): return self.minors[h.i]

    def nvmlDeviceGetUtilizationRates(self, h):
        self._alive(h)
        return SimpleNamespace(gpu=[97, 0][h.i], memory=3)

    def nvmlDeviceGetMemoryInfo(self, h):
        self._alive(h)
        return SimpleNamespace(used=[40, 0][h.i] * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h):
        self._alive(h)
        return self.power_mw[h.i]

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._alive(h)
        return [71, 33][h.i]

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        self._alive(h)
        if self.dbe[h.i] is None:
            raise FakeNVMLError("Not Supported")
        return self.dbe[h.i]

    def nvmlDeviceGetRemappedRows(self, h):
        self._alive(h)
        return (0, 1 if self.remap_failure[h.i] else 0, False, self.remap_failure[h.i])

    def nvmlEventSetCreate(self):
        if not self.events:
            raise FakeNVMLError("Not Supported")
        return "set"

    def nvmlDeviceRegisterEvents(self, h, kinds, event_set):
        self.handles = getattr(self, "handles", {})
        self.handles[h.i] = h

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        if not self.pending_xids:
            raise FakeNVMLError("Timeout")
        i, xid = self.pending_xids.pop(0)
        return SimpleNamespace(device=self.handles[i], eventData=xid)
