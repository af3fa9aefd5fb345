"""Every GPU through NVML (nvidia-ml-py): utilisation, memory, power, temperature,
uncorrectable ECC errors and XID events. Idle GPUs are sampled too: idle power
is part of what the paper measured."""

from __future__ import annotations

from typing import Any

from slurm_acme.telemetry.records import Reading, checked

#: ``NVML_ERROR_GPU_IS_LOST``: the GPU fell off the bus (pynvml's value).
GPU_IS_LOST = 15


class NvmlSampler:
    """Samples all GPUs NVML sees; ``nvml`` is the pynvml module (a fake in tests)."""

    name = "nvml"

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml
        self.handles: list[tuple[int, Any, str | None, int | None]] = []
        self.events: Any = None
        self.said: set[str] = set()
        self._lost_now = False

    def probe(self) -> str | None:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                return "nvidia-ml-py is not installed (pip install 'slurm-acme[nvml]')"
            self._nvml = pynvml
        nv = self._nvml
        try:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            return f"NVML cannot start: {exc}"
        if count == 0:
            return "NVML sees no GPU"
        for index in range(count):
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            self.handles.append((index, handle, self._call(nv.nvmlDeviceGetUUID, handle),
                                 self._call(nv.nvmlDeviceGetMinorNumber, handle)))
        self._register_xid_events()
        return None

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            value = fn(*args)
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(self._nvml, "NVML_ERROR_GPU_IS_LOST", GPU_IS_LOST):
                self._lost_now = True
            return None
        return value.decode() if isinstance(value, bytes) else value

    def _register_xid_events(self) -> None:
        nv = self._nvml
        try:
            self.events = nv.nvmlEventSetCreate()
            for _, handle, _, _ in self.handles:
                nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, self.events)
        except nv.NVMLError:
            self.events = None  # XID events unsupported here; the xid column stays empty

    def _drain_xids(self) -> dict[int, list[int]]:
        """Every XID per NVML device index since the last tick, in order (non-blocking).

        Keyed by index, not UUID: a GPU whose UUID NVML cannot read still gets
        its own XIDs, and an event from a device not probed lands on none.
        """
        nv = self._nvml
        seen: dict[int, list[int]] = {}
        if self.events is None:
            return seen
        by_handle = {id(h): index for index, h, _, _ in self.handles}
        while True:
            try:
                event = nv.nvmlEventSetWait_v2(self.events, 0)
            except nv.NVMLError:
                return seen
            index = by_handle.get(id(event.device))
            if index is not None:
                seen.setdefault(index, []).append(int(event.eventData))

    def _remap_failed(self, handle: Any) -> bool | None:
        """Whether the GPU's row remapper has failed (A100 and later; None elsewhere)."""
        remapped = getattr(self._nvml, "nvmlDeviceGetRemappedRows", None)
        rows = self._call(remapped, handle) if remapped is not None else None
        if not isinstance(rows, (tuple, list)) or len(rows) < 4:
            return None
        return bool(rows[3])

    def sample(self, busy: dict[int, str]) -> Reading:
        nv = self._nvml
        reading = Reading()
        xids = self._drain_xids()
        for index, handle, uuid, minor in self.handles:
            flags: list[str] = []
            self._lost_now = False
            util = self._call(nv.nvmlDeviceGetUtilizationRates, handle)
            memory = self._call(nv.nvmlDeviceGetMemoryInfo, handle)
            power_mw = self._call(nv.nvmlDeviceGetPowerUsage, handle)
            ecc = self._call(nv.nvmlDeviceGetTotalEccErrors, handle,
                             nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
            power = checked(power_mw, "power_w", flags)
            ecc_value = checked(ecc, "ecc_dbe", flags)
            # Attribution uses the device minor number: it is what Slurm's
            # gres.conf File=/dev/nvidiaN and SLURM_JOB_GPUS count by.
            reading.gpus[minor if minor is not None else index] = {
                "gpu_uuid": uuid,
                "util_percent": checked(util.gpu, "util_percent", flags) if util else None,
                "mem_used_bytes": checked(memory.used, "mem_used_bytes", flags) if memory else None,
                "mem_total_bytes": checked(memory.total, "mem_total_bytes", flags) if memory else None,
                "power_w": power / 1000.0 if power is not None else None,
                "temp_c": checked(self._call(nv.nvmlDeviceGetTemperature, handle,
                                             nv.NVML_TEMPERATURE_GPU), "temp_c", flags),
                "ecc_dbe": int(ecc_value) if ecc_value is not None else None,
                "xid": seen[-1] if (seen := xids.get(index)) else None,
                # Hardware events for the node-health ledger (not sample columns):
                # every XID of the tick, the row remapper's failure, a GPU gone.
                "xid_events": xids.get(index, []),
                "remap_failed": self._remap_failed(handle),
                "lost": self._lost_now,
                "source": "nvml",
                "flags": flags,
            }
        return reading

    def close(self) -> None:
        if self._nvml is not None and self.handles:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
