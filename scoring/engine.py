"""The one module that talks to the Docker Engine.

Everything else in Podium calls these functions (or a fake with the same shape in
unit tests). Any error the engine raises comes out as :class:`EngineError`, which
callers treat as a platform failure, never as the entrant's.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import IO, Any

import docker
import docker.errors
import docker.types
import requests.exceptions

LABEL = "podium"  # every container and image Podium makes carries this label
# How often a build's cap is re-checked (and the machine lock consulted).
BUILD_POLL_S = 1.0
# The runtime of every container Podium creates for a build: never one that adds GPUs.
BUILD_RUNTIME = "runc"


class EngineError(Exception):
    """The Docker Engine failed or could not be reached (a platform fault)."""


class NoSuchObject(EngineError):
    """The image or container does not exist."""


class ImageInUse(EngineError):
    """A running (or paused) container uses the image, so it was left in place."""


@dataclass(frozen=True)
class BuildOutcome:
    ok: bool
    timed_out: bool = False
    error: str = ""


@dataclass(frozen=True)
class BuildBounds:
    """What confines a build's containers: the network they join, the cgroup they are
    made under (which carries the PID bound), memory (swap included) and CPUs: a quota of
    ``cpus``, on the CPUs of ``cpuset`` ("" for any; the non-scoring CPUs, portal/core/cpus.py).

    No GPU: a container Podium creates for a build (build.sh's) runs with the plain
    runtime and ``NVIDIA_VISIBLE_DEVICES=void``, whatever the engine's default runtime
    and the image's ENV. ``POST /build`` takes no runtime, and a build argument never
    overrides an image's ENV, so RUN steps get the engine's default runtime: the build
    guard (scoring/build/buildbox.py) stops a step that one would hand GPUs."""

    network: str
    cgroup_parent: str
    memory_bytes: int
    pids_limit: int
    cpus: float
    cpuset: str = ""

    def build_params(self) -> dict[str, Any]:
        """The ``POST /build`` query parameters: applied to every RUN step's container."""
        period = 100_000
        return {
            "networkmode": self.network,
            "cgroupparent": self.cgroup_parent,
            "memory": self.memory_bytes,
            "memswap": self.memory_bytes,
            "cpuperiod": period,
            "cpuquota": int(self.cpus * period),
            **({"cpusetcpus": self.cpuset} if self.cpuset else {}),
        }

    def host_config(self) -> dict[str, Any]:
        """The same bounds as ``create_container`` keywords (the PID bound is the cgroup
        parent's, as for RUN steps), with the plain runtime and no GPU visible."""
        return {
            "runtime": BUILD_RUNTIME,
            "environment": {"NVIDIA_VISIBLE_DEVICES": "void"},
            "network_mode": self.network,
            "cgroup_parent": self.cgroup_parent,
            "mem_limit": self.memory_bytes,
            "memswap_limit": self.memory_bytes,
            "nano_cpus": int(self.cpus * 1e9),
            **({"cpuset_cpus": self.cpuset} if self.cpuset else {}),
        }


@dataclass(frozen=True)
class ImageInfo:
    id: str  # "sha256:..." content digest of the image config
    size: int  # bytes


def _wrap(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except docker.errors.NotFound as exc:
        raise NoSuchObject(str(exc)) from exc
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineError(str(exc)) from exc


@cache
def client() -> docker.DockerClient:
    return _wrap(lambda: docker.from_env(version="auto", timeout=120))


def available() -> bool:
    """Whether a Docker Engine answers here."""
    try:
        return bool(client().ping())
    except EngineError:
        return False


def info() -> dict[str, Any]:
    """The engine's ``docker info`` (storage and cgroup drivers, name, versions)."""
    return dict(_wrap(lambda: client().info()))


def version() -> str:
    return str(_wrap(lambda: client().version()).get("Version", ""))


def host_name() -> str:
    """The engine's own name (its host's hostname), the same for every client of it."""
    return str(_wrap(lambda: client().info()).get("Name", ""))


# Images ---------------------------------------------------------------------------


def build_image(
    *,
    context: IO[bytes],
    tag: str,
    on_log: Callable[[str], None],
    timeout_s: float,
    buildargs: dict[str, str] | None = None,
    platform: str = "",
    labels: dict[str, str] | None = None,
    frozen: Callable[[], bool] | None = None,
    bounds: BuildBounds | None = None,
) -> BuildOutcome:
    """Build ``context`` (a tar with a Dockerfile at its root) as ``tag``.

    Streams the build output to ``on_log``. Stops the build when ``timeout_s`` passes:
    closing the connection makes the engine cancel it, and no image is tagged. Only
    time when ``frozen()`` is false counts towards ``timeout_s`` (checked every
    ``BUILD_POLL_S``): a build paused while a score holds the machine keeps its cap.
    ``labels`` are set on the final image (the engine adds them as a last LABEL step).
    ``bounds`` put every RUN step's container on a network, under a cgroup parent and
    within memory and CPU limits.
    """
    result: dict[str, BuildOutcome] = {}
    holder: dict[str, Any] = {}
    params: dict[str, Any] = {
        "t": tag,
        "rm": True,
        "forcerm": True,
        "pull": False,
        "buildargs": json.dumps(buildargs or {}),
        "labels": json.dumps({LABEL: "1", **(labels or {})}),
    }
    if platform:
        params["platform"] = platform
    if bounds is not None:
        params.update(bounds.build_params())

    def consume() -> None:
        try:
            stream = _post_build(context, params)
            holder["stream"] = stream
            for chunk in stream:
                if "stream" in chunk:
                    on_log(str(chunk["stream"]))
                if "error" in chunk:
                    on_log(str(chunk["error"]) + "\n")
                    result["outcome"] = BuildOutcome(ok=False, error=str(chunk["error"]).strip())
                    return
            result["outcome"] = BuildOutcome(ok=True)
        except Exception as exc:
            result.setdefault("outcome", BuildOutcome(ok=False, error=f"engine: {exc}"))

    worker = threading.Thread(target=consume, daemon=True)
    worker.start()
    if not _join_within(worker, timeout_s, frozen):
        result["outcome"] = BuildOutcome(ok=False, timed_out=True, error="build timed out")
        _close_stream(holder.get("stream"))
        worker.join(30)
    return result["outcome"]


def _post_build(context: IO[bytes], params: dict[str, Any]) -> Any:
    """``POST /build`` with every query parameter the engine takes (the SDK's ``build``
    has no ``cgroupparent`` nor CPU quota); the decoded progress stream."""
    api = client().api
    headers = {"Content-Type": "application/tar"}
    api._set_auth_headers(headers)  # registry credentials, as the SDK's build sends them
    response = api._post(
        api._url("/build"), data=context, params=params, headers=headers, stream=True, timeout=None
    )
    return api._stream_helper(response, decode=True)  # an error status raises when read


def _join_within(
    worker: threading.Thread, timeout_s: float, frozen: Callable[[], bool] | None
) -> bool:
    """Join ``worker``; False once ``timeout_s`` of unfrozen time passed first."""
    if frozen is None:
        worker.join(timeout_s)
        return not worker.is_alive()
    counted = 0.0
    last = time.monotonic()
    while True:
        worker.join(max(0.01, min(BUILD_POLL_S, timeout_s - counted)))
        now = time.monotonic()
        if not worker.is_alive():
            return True
        if not frozen():
            counted += now - last
        last = now
        if counted >= timeout_s:
            return False


def _close_stream(stream: Any) -> None:
    """Close a streaming API response so the engine cancels the request.

    Closing alone is not enough: the reader thread stays blocked in ``recv`` on the
    socket, which keeps the connection open, so the engine goes on building (a silent
    ``RUN sleep`` runs to its end, past the cap). Shutting the socket down wakes the
    reader and lets the engine see the client leave; it then kills the build container.
    """
    response = getattr(getattr(stream, "gi_frame", None), "f_locals", {}).get("response")
    raw = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    sock = getattr(getattr(raw, "raw", None), "_sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):  # already closed by the engine: fine
            sock.shutdown(socket.SHUT_RDWR)
    for obj in (response, stream):
        close = getattr(obj, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()


def image_info(ref: str) -> ImageInfo:
    data = _wrap(lambda: client().api.inspect_image(ref))
    return ImageInfo(id=str(data["Id"]), size=int(data["Size"]))


def image_labels(ref: str) -> dict[str, str]:
    """The labels of image ``ref`` (its config's ``Labels``); raises :class:`NoSuchObject`
    when the engine has no such image."""
    data = _wrap(lambda: client().api.inspect_image(ref))
    return {str(k): str(v) for k, v in ((data.get("Config") or {}).get("Labels") or {}).items()}


def image_volumes(ref: str) -> list[str]:
    """The volumes image ``ref`` declares (its config's ``Volumes``: each gets an
    anonymous volume in every container made from it), sorted; raises
    :class:`NoSuchObject` when the engine has no such image."""
    data = _wrap(lambda: client().api.inspect_image(ref))
    return sorted((data.get("Config") or {}).get("Volumes") or {})


def unnamed_image_id(ref: str) -> str | None:
    """The full ID of image ``ref`` when the engine has it and it carries no name (no
    tag, no registry digest), as a build's intermediate images do; None otherwise."""
    try:
        data = _wrap(lambda: client().api.inspect_image(ref))
    except NoSuchObject:
        return None
    if data.get("RepoTags") or data.get("RepoDigests"):
        return None
    return str(data["Id"])


def remove_unnamed_image(image_id: str) -> bool:
    """Remove an image that carries no name, and the unnamed parents only it kept.

    Never forced: the engine keeps it (False) while a container, or a child image, uses
    it; False too when it is already gone. True when the engine removed it.
    """
    try:
        _wrap(lambda: client().api.remove_image(image_id, force=False, noprune=False))
    except NoSuchObject:
        return False
    except EngineError as exc:
        if isinstance(exc.__cause__, docker.errors.APIError) and exc.__cause__.status_code == 409:
            return False  # in use: a container or a child image
        raise
    return True


def image_exists(ref: str) -> bool:
    try:
        image_info(ref)
    except NoSuchObject:
        return False
    return True


def remove_image(ref: str) -> None:
    """Remove an image; a missing one is already removed."""
    with contextlib.suppress(NoSuchObject):
        _wrap(lambda: client().api.remove_image(ref, force=True, noprune=False))


def remove_image_if_unused(ref: str) -> bool:
    """Remove image ``ref`` (and the parents only it kept) unless a container runs it.

    True when the engine removed it, False when it was already gone. Raises
    :class:`ImageInUse` (naming the containers) when a running, paused or restarting
    container was made from it: nothing is removed then. Stopped containers do not keep
    it. A container that starts between the check and the removal is safe too: the
    engine then only untags the image it runs.
    """
    try:
        image_id = image_info(ref).id
    except NoSuchObject:
        return False
    active = _wrap(
        lambda: client().api.containers(
            all=True, filters={"status": ["running", "paused", "restarting"]}
        )
    )
    users = [str(c["Id"])[:12] for c in active if c.get("ImageID") == image_id]
    if users:
        raise ImageInUse(f"{ref} is used by running container(s) {', '.join(users)}")
    try:
        _wrap(lambda: client().api.remove_image(ref, force=True, noprune=False))
    except NoSuchObject:
        return False  # removed by someone else meanwhile
    return True


def list_images() -> list[dict[str, Any]]:
    """Every image this engine holds that has a name or digest (``Id``, ``RepoTags``,
    ``RepoDigests``, ``Size``, ``Labels``), as ``docker images`` lists them."""
    return list(_wrap(lambda: client().api.images()))


def disk_usage() -> dict[str, dict[str, int]]:
    """What this engine's data takes on its disk (``docker system df``): for its images,
    containers (their own layers), build cache and volumes, how many there are
    (``count``) and their bytes (``bytes``; the images' shared layers once). A size the
    engine could not compute (``-1``) counts as 0."""
    data = _wrap(lambda: client().df())

    def sized(items: Any, size: Callable[[dict[str, Any]], Any]) -> dict[str, int]:
        rows = [item for item in items or [] if isinstance(item, dict)]
        return {"count": len(rows), "bytes": sum(max(0, int(size(row) or 0)) for row in rows)}

    images = sized(data.get("Images"), lambda row: row.get("Size"))
    return {
        "images": {"count": images["count"], "bytes": max(0, int(data.get("LayersSize") or 0))},
        "containers": sized(data.get("Containers"), lambda row: row.get("SizeRw")),
        "build_cache": sized(data.get("BuildCache"), lambda row: row.get("Size")),
        "volumes": sized(data.get("Volumes"), lambda row: (row.get("UsageData") or {}).get("Size")),
    }


def tag_image(source: str, repository: str, tag: str) -> None:
    """Name image ``source`` ``repository:tag`` too (nothing is copied)."""
    if not _wrap(lambda: client().api.tag(source, repository, tag=tag)):
        raise EngineError(f"could not tag {source} as {repository}:{tag}")


def push_image(repository: str, tag: str) -> str:
    """Push ``repository:tag`` to the registry its name starts with; the manifest digest
    (``sha256:...``) the registry stored it under, which names this content for good
    whatever later happens to the tag."""

    def push() -> str:
        digest = ""
        for chunk in client().api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise EngineError(f"pushing {repository}:{tag} failed: {chunk['error']}")
            digest = str((chunk.get("aux") or {}).get("Digest") or digest)
        return digest

    digest = str(_wrap(push))
    if not digest.startswith("sha256:"):
        raise EngineError(f"the registry named no digest for {repository}:{tag}")
    return digest


def pull_image(ref: str) -> ImageInfo:
    """Pull ``ref`` from its registry and inspect what the engine now holds under it.

    With a digest reference (``registry/name@sha256:...``) the engine checks that the
    manifest it receives has that digest, and each layer its own; layers it already has
    are not fetched again. Raises :class:`NoSuchObject` when the registry has no such
    manifest, :class:`EngineError` when it cannot be reached or the pull fails.
    """

    def pull() -> None:
        for chunk in client().api.pull(ref, stream=True, decode=True):
            if "error" in chunk:
                raise EngineError(f"pulling {ref} failed: {chunk['error']}")

    _wrap(pull)
    return image_info(ref)


def image_platform(ref: str) -> tuple[str, str, str] | None:
    """``ref``'s ``Os``, ``Architecture`` and ``Variant`` in this engine; None when it is
    not here or the engine cannot be asked. Never raises."""
    try:
        data = client().api.inspect_image(ref)
    except Exception:  # not local, or no engine: this engine cannot tell
        return None
    return (
        str(data.get("Os") or ""),
        str(data.get("Architecture") or ""),
        str(data.get("Variant") or ""),
    )


def registry_platforms(ref: str, timeout_s: float) -> list[dict[str, Any]] | None:
    """The ``Platforms`` of ``ref``'s manifest list, as the engine reads it from its registry
    (``GET /distribution/{ref}/json``, with the engine's credentials); None when that
    fails or takes longer than ``timeout_s`` (the request then ends on its own, at the
    client's timeout, in a thread nobody waits for). Never raises."""
    answer: dict[str, list[dict[str, Any]]] = {}

    def ask() -> None:
        try:
            result = client().api.inspect_distribution(ref)
        except Exception:  # no registry, unreachable, refused: it cannot tell
            return
        if isinstance(result, dict):
            answer["platforms"] = [p for p in result.get("Platforms") or [] if isinstance(p, dict)]

    asking = threading.Thread(target=ask, name="podium-distribution", daemon=True)
    asking.start()
    asking.join(timeout_s)
    return answer.get("platforms")


def image_has_path(ref: str, path: str) -> bool:
    """Whether ``path`` exists in the image (checked without running anything)."""
    container_id = create_container(image=ref, command=["/nonexistent"], entrypoint=[])
    try:
        return path_stat(container_id, path) is not None
    finally:
        remove_container(container_id)


# Containers -----------------------------------------------------------------------


def create_container(**spec: Any) -> str:
    """Create (not start) a container; ``spec`` is the docker SDK's ``create_host_config`` mix.

    Keys understood: image, command, entrypoint, user, working_dir, environment,
    network_mode, labels, healthcheck, and any host-config keyword (read_only, mounts, binds,
    tmpfs, cap_drop, security_opt, pids_limit, mem_limit, memswap_limit, log_config,
    device_requests, nano_cpus, init, storage_opt).
    """
    container_kw = {
        key: spec.pop(key)
        for key in (
            "image",
            "command",
            "entrypoint",
            "user",
            "working_dir",
            "environment",
            "labels",
            "network_disabled",
            "stop_signal",
            "healthcheck",
        )
        if key in spec
    }
    container_kw["labels"] = {LABEL: "1", **container_kw.get("labels", {})}
    api = client().api
    host_config = _wrap(lambda: api.create_host_config(**spec))
    created = _wrap(lambda: api.create_container(host_config=host_config, **container_kw))
    return str(created["Id"])


def start(container_id: str) -> None:
    _wrap(lambda: client().api.start(container_id))


def wait(container_id: str, timeout_s: float) -> int | None:
    """Wait for the container to stop; its exit code, or None when ``timeout_s`` passed."""
    try:
        result = client().api.wait(container_id, timeout=timeout_s)
    except requests.exceptions.ConnectionError as exc:  # read timeout surfaces as this
        if "timed out" in str(exc).lower():
            return None
        raise EngineError(str(exc)) from exc
    except requests.exceptions.ReadTimeout:
        return None
    except docker.errors.DockerException as exc:
        raise EngineError(str(exc)) from exc
    return int(result.get("StatusCode", -1))


def kill(container_id: str) -> None:
    """SIGKILL a running container; one already stopped or gone is fine."""
    with contextlib.suppress(EngineError):
        _wrap(lambda: client().api.kill(container_id))


def pause(container_id: str) -> None:
    _wrap(lambda: client().api.pause(container_id))


def unpause(container_id: str) -> None:
    _wrap(lambda: client().api.unpause(container_id))


def remove_container(container_id: str) -> None:
    with contextlib.suppress(NoSuchObject):
        _wrap(lambda: client().api.remove_container(container_id, force=True, v=True))


def state(container_id: str) -> dict[str, Any]:
    return dict(_wrap(lambda: client().api.inspect_container(container_id))["State"])


def container_exists(container_id: str) -> bool:
    """Whether the engine still has container ``container_id`` (in any state)."""
    try:
        state(container_id)
    except NoSuchObject:
        return False
    return True


def cgroup_parent(container_id: str) -> str:
    """The cgroup parent the container was created under ("" for the engine's default)."""
    data = _wrap(lambda: client().api.inspect_container(container_id))
    return str((data.get("HostConfig") or {}).get("CgroupParent") or "")


def refuses_size_quota(exc: EngineError) -> bool:
    """Whether a create failed only because the engine's storage driver keeps no size
    quota per container (``--storage-opt size``): overlay2 off XFS with project quotas,
    fuse-overlayfs, vfs and the like answer so."""
    text = str(exc).lower()
    return "storage-opt" in text and "support" in text


def inspect_container(container_id: str) -> dict[str, Any]:
    """The container's ``docker inspect``: its host config, environment and, under
    ``GraphDriver``, where its writable layer lies."""
    return dict(_wrap(lambda: client().api.inspect_container(container_id)))


def logs(container_id: str, *, stdout: bool = True, stderr: bool = False) -> bytes:
    return bytes(
        _wrap(lambda: client().api.logs(container_id, stdout=stdout, stderr=stderr, stream=False))
    )


def follow_logs(container_id: str) -> Iterator[bytes]:
    """Stream the container's stdout and stderr until it stops."""
    stream = _wrap(
        lambda: client().api.logs(container_id, stdout=True, stderr=True, stream=True, follow=True)
    )
    try:
        yield from stream
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineError(str(exc)) from exc


def export_container(container_id: str) -> Iterator[bytes]:
    """The container's whole filesystem as one tar stream, in chunks (never started)."""
    chunks = _wrap(lambda: client().api.export(container_id, chunk_size=1 << 20))
    return iter(chunks)


def put_archive(container_id: str, path: str, data: IO[bytes] | bytes) -> None:
    """Unpack a tar stream at ``path`` inside a (created or stopped) container."""
    ok = _wrap(lambda: client().api.put_archive(container_id, path, data))
    if not ok:
        raise EngineError(f"could not copy files into the container at {path}")


def path_stat(container_id: str, path: str) -> dict[str, Any] | None:
    """The engine's stat of ``path`` in a container (mode, size, linkTarget), or None."""
    try:
        _stream, stat = _wrap(lambda: client().api.get_archive(container_id, path))
    except NoSuchObject:
        return None
    return dict(stat)


def read_file(container_id: str, path: str, limit: int) -> bytes | None:
    """The first ``limit`` bytes of a regular file in a container, or None if absent."""
    try:
        stream, _stat = _wrap(lambda: client().api.get_archive(container_id, path))
    except NoSuchObject:
        return None
    raw = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        member = tar.next()
        if member is None or not member.isfile():
            return None
        extracted = tar.extractfile(member)
        return extracted.read(limit) if extracted else None


def commit(
    container_id: str, *, repository: str, tag: str, labels: dict[str, str] | None = None
) -> ImageInfo:
    """Commit a stopped container as ``repository:tag``.

    The engine merges the container's labels into the image's; ``labels`` override
    them (an empty value blanks one the image must not carry on).
    """
    conf = {"Labels": {LABEL: "1", **(labels or {})}}
    _wrap(lambda: client().api.commit(container_id, repository=repository, tag=tag, conf=conf))
    return image_info(f"{repository}:{tag}")


def list_containers(label: str | list[str] = LABEL, *, status: str = "") -> list[dict[str, Any]]:
    """Containers carrying ``label`` (``key`` or ``key=value``; a list: every one of them),
    optionally in ``status`` (created, running, paused, exited...)."""
    filters: dict[str, Any] = {"label": label}
    if status:
        filters["status"] = status
    return list(_wrap(lambda: client().api.containers(all=True, filters=filters)))


class EventStream:
    """The engine's event stream (``docker events``), as decoded dicts.

    Iterating ends when the stream ends or :meth:`close` is called (from any thread);
    an engine failure ends it too, silently: the caller resubscribes or gives up.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for event in self._stream:
                if isinstance(event, dict):
                    yield event
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
            return
        except ValueError:  # a half-read chunk after close(): the stream is over
            return

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()


def container_events(*, labels: list[str], actions: list[str]) -> EventStream:
    """Subscribe to container events (``actions`` such as start, unpause) of containers
    carrying every one of ``labels``. Events are delivered from the moment this returns."""
    filters = {"type": ["container"], "event": actions, "label": labels}
    return EventStream(_wrap(lambda: client().api.events(decode=True, filters=filters)))


# Networks ----------------------------------------------------------------------------


def network_info(name: str) -> dict[str, Any] | None:
    """The engine's inspection of network ``name``, or None when it does not exist."""
    try:
        return dict(_wrap(lambda: client().api.inspect_network(name)))
    except NoSuchObject:
        return None


def create_bridge_network(
    name: str, *, bridge: str, subnet: str, mtu: int, icc: bool = False
) -> None:
    """Create a bridge network whose Linux bridge is named ``bridge`` (so host firewall
    rules can name it), on ``subnet``, masqueraded to the outside, with containers on it
    unable to reach each other unless ``icc``. It does not depend on ``docker0``."""
    options = {
        "com.docker.network.bridge.name": bridge,
        "com.docker.network.bridge.enable_icc": str(icc).lower(),
        "com.docker.network.bridge.enable_ip_masquerade": "true",
    }
    if mtu:
        options["com.docker.network.driver.mtu"] = str(mtu)
    ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])
    _wrap(
        lambda: client().api.create_network(
            name, driver="bridge", options=options, ipam=ipam, labels={LABEL: "1"}
        )
    )


def remove_network(name: str) -> None:
    with contextlib.suppress(NoSuchObject):
        _wrap(lambda: client().api.remove_network(name))


def containers_on_network(network: str, *, sizes: bool = False) -> list[dict[str, Any]]:
    """Running and paused containers attached to ``network``; with ``sizes``, each with
    ``SizeRw``, the bytes written to its own layer."""
    return list(
        _wrap(
            lambda: client().api.containers(
                filters={"network": [network], "status": ["running", "paused"]}, size=sizes
            )
        )
    )
