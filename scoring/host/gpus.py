"""A scoring host's GPUs: what NVML says of them, and what a scored container gets.

Pure of Django and Docker, so ``scripts/gpu-check`` uses it on a bare GPU machine:

- :func:`read` takes one :class:`Snapshot` of the configured GPUs through NVML
  (``nvidia-ml-py``, imported only when called): driver and CUDA versions, and per GPU
  its utilization (sampled several times over a short window), memory in use,
  temperature, persistence mode, volatile uncorrected ECC count and compute processes,
  plus the XID events NVML delivered since the previous snapshot of this process.
  ``scoring.host.gates.gpu`` decides on a snapshot; snapshots round-trip through JSON
  (:func:`snapshot_from_json`), so recorded readings test the decisions. The GPU meter
  (``scoring.run.gpumeter``, a scored run's energy and utilization) samples through the same
  session (:func:`session`).
- :func:`container_gpus` is the part of a scored container's spec that gives it exactly
  the host's configured GPUs and nothing more: an NVIDIA ``DeviceRequest`` naming the
  devices with the ``gpu`` capability (or CDI device names, on engines that take them),
  and ``NVIDIA_DRIVER_CAPABILITIES=compute,utility``. A build never gets this.
- :func:`registration_problem` says, in one line, why a host of a GPU class must not
  register (no NVIDIA runtime, a configured GPU that ``nvidia-smi -L`` does not list).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

DRIVER_CAPABILITIES = "compute,utility"
CDI_KIND = "nvidia.com/gpu"
# NVML's event type for critical XID errors (nvmlEventTypeXidCriticalError).
XID_CRITICAL = 0x8


class GpuReadError(Exception):
    """NVML could not be read, or a configured GPU is missing (the gate then fails)."""


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML reported it during one snapshot."""

    index: int
    uuid: str
    name: str
    util_percent: list[int]
    memory_used_mib: int
    memory_total_mib: int
    temp_c: int
    persistence: bool | None  # None: not supported (never on a data-center GPU)
    ecc_uncorrected: int | None  # volatile count since the driver loaded; None: no ECC
    processes: list[int] = field(default_factory=list)  # PIDs of compute processes


@dataclass(frozen=True)
class Snapshot:
    """The configured GPUs at one moment, with the host's driver and CUDA versions."""

    driver: str
    cuda: str
    gpus: list[Gpu]
    xid_events: list[dict[str, int]] | None = None  # None: NVML events not supported
    read_ms: float = 0.0


def snapshot_to_json(snapshot: Snapshot) -> dict[str, Any]:
    return asdict(snapshot)


def snapshot_from_json(data: dict[str, Any]) -> Snapshot:
    return Snapshot(
        driver=str(data["driver"]),
        cuda=str(data["cuda"]),
        gpus=[Gpu(**gpu) for gpu in data["gpus"]],
        xid_events=data.get("xid_events"),
        read_ms=float(data.get("read_ms", 0.0)),
    )


def cuda_version(driver_cuda: int) -> str:
    """NVML's CUDA driver version (``13000``) as people write it (``13.0``)."""
    return f"{driver_cuda // 1000}.{driver_cuda % 1000 // 10}"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Nvml:
    """One NVML session of a process (``nvmlInit`` once), with an XID event set over the
    GPUs it was opened for, so that each snapshot reports the events since the last one."""

    def __init__(self, devices: Sequence[str]) -> None:
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
            raise GpuReadError("nvidia-ml-py is not installed") from exc
        self.nvml: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise GpuReadError(f"NVML could not start: {exc}") from exc
        self.handles = [self._handle(device) for device in devices]
        self.events: Any = None
        try:
            events = pynvml.nvmlEventSetCreate()
            for handle in self.handles:
                pynvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL, events)
            self.events = events
        except pynvml.NVMLError:
            self.events = None  # not supported here (some virtual machines): recorded so

    def _handle(self, device: str) -> Any:
        nvml = self.nvml
        try:
            if device.isdigit():
                return nvml.nvmlDeviceGetHandleByIndex(int(device))
            return nvml.nvmlDeviceGetHandleByUUID(device)
        except nvml.NVMLError as exc:
            raise GpuReadError(f"GPU {device} is not there: {exc}") from exc

    def _optional(self, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except self.nvml.NVMLError_NotSupported:
            return None

    def xid_events(self) -> list[dict[str, int]] | None:
        if self.events is None:
            return None
        nvml = self.nvml
        found: list[dict[str, int]] = []
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(self.events, 0)
            except nvml.NVMLError_Timeout:
                return found
            found.append({"xid": int(data.eventData), "gpu_instance": int(data.gpuInstanceId)})

    def snapshot(self, samples: int = 5, interval_s: float = 0.1) -> Snapshot:
        """The configured GPUs now; utilization sampled ``samples`` times ``interval_s``
        apart (a short burst of work between two samples still shows)."""
        nvml = self.nvml
        started = time.monotonic()
        try:
            util: list[list[int]] = [[] for _ in self.handles]
            for sample in range(max(1, samples)):
                if sample:
                    time.sleep(interval_s)
                for slot, handle in enumerate(self.handles):
                    util[slot].append(int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
            gpus = []
            for slot, handle in enumerate(self.handles):
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                persistence = self._optional(nvml.nvmlDeviceGetPersistenceMode, handle)
                ecc = self._optional(
                    nvml.nvmlDeviceGetTotalEccErrors,
                    handle,
                    nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                    nvml.NVML_VOLATILE_ECC,
                )
                processes = self._optional(nvml.nvmlDeviceGetComputeRunningProcesses, handle)
                gpus.append(
                    Gpu(
                        index=int(nvml.nvmlDeviceGetIndex(handle)),
                        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                        name=_text(nvml.nvmlDeviceGetName(handle)),
                        util_percent=util[slot],
                        memory_used_mib=int(memory.used) >> 20,
                        memory_total_mib=int(memory.total) >> 20,
                        temp_c=int(
                            nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
                        ),
                        persistence=None if persistence is None else bool(persistence),
                        ecc_uncorrected=None if ecc is None else int(ecc),
                        processes=sorted(int(p.pid) for p in processes or []),
                    )
                )
            return Snapshot(
                driver=_text(nvml.nvmlSystemGetDriverVersion()),
                cuda=cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion())),
                gpus=gpus,
                xid_events=self.xid_events(),
                read_ms=round((time.monotonic() - started) * 1000, 3),
            )
        except nvml.NVMLError as exc:
            raise GpuReadError(f"NVML: {exc}") from exc


_sessions: dict[tuple[str, ...], Nvml] = {}


def session(devices: Sequence[str]) -> Nvml:
    """This process's NVML session over ``devices`` (indices or UUIDs), opened once: the
    gates' snapshots and the GPU meter (``scoring.run.gpumeter``) share it."""
    if not devices:
        raise GpuReadError("no GPU is configured (PODIUM_GPU_DEVICES)")
    key = tuple(devices)
    if key not in _sessions:
        _sessions[key] = Nvml(devices)
    return _sessions[key]


def read(devices: Sequence[str], samples: int = 5, interval_s: float = 0.1) -> Snapshot:
    """A snapshot of ``devices`` (indices or UUIDs) through this process's NVML session."""
    return session(devices).snapshot(samples, interval_s)


# The scored container ------------------------------------------------------------------


def container_gpus(devices: Sequence[str], *, cdi: bool = False) -> dict[str, Any]:
    """The keys a scored container's spec gains for ``devices`` (``{}`` for none).

    Exactly these GPUs: a device request of the NVIDIA runtime names them (never
    ``count=-1``, "all") with the ``gpu`` capability, or, with ``cdi``, a request of the
    engine's CDI driver for ``nvidia.com/gpu=<device>`` (what ``docker run --device``
    sends from Engine 25 on). The driver mounts only the compute and utility libraries
    (no graphics, video or display).
    """
    if not devices:
        return {}
    spec: dict[str, Any] = {
        "environment": [
            f"NVIDIA_DRIVER_CAPABILITIES={DRIVER_CAPABILITIES}",
            f"NVIDIA_VISIBLE_DEVICES={','.join(devices)}",
        ]
    }
    request: dict[str, Any]
    if cdi:
        request = {"driver": "cdi", "device_ids": [f"{CDI_KIND}={d}" for d in devices]}
    else:
        request = {"driver": "nvidia", "device_ids": list(devices), "capabilities": [["gpu"]]}
    spec["device_requests"] = [request]
    return spec


def registration_problem(
    *,
    gpus_in_class: int,
    devices: Sequence[str],
    runtimes: Iterable[str],
    cdi: bool,
    listed: Sequence[dict[str, Any]],
) -> str:
    """Why this host must not register for its class, in one line ("" when it may).

    A GPU class needs: as many configured devices as the class gives each host, an
    engine with the NVIDIA runtime (or CDI), and every configured device listed by
    ``nvidia-smi -L`` (``listed``: ``{"index", "uuid", ...}``) by index or UUID.
    """
    if gpus_in_class <= 0:
        return ""
    if len(devices) != gpus_in_class:
        return (
            f"the class gives each host {gpus_in_class} GPU(s) but PODIUM_GPU_DEVICES names "
            f"{len(devices)}"
        )
    if not cdi and "nvidia" not in set(runtimes):
        return "the Docker Engine has no NVIDIA runtime (install the NVIDIA Container Toolkit)"
    known = {str(gpu.get("index")) for gpu in listed} | {str(gpu.get("uuid")) for gpu in listed}
    missing = [device for device in devices if device not in known]
    if missing:
        return f"nvidia-smi does not list GPU {', '.join(missing)}"
    return ""
