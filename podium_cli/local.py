"""The ladder's first rungs, before any upload: ``podium validate`` and ``podium run --local``.

``validate`` checks an entry folder as the portal would take it: the archive the folder
packs into (its size against the benchmark's limit), ``run`` and ``build.sh`` at its top
level, and the Dockerfile judged by the benchmark's own policy on the portal
(``POST /benchmarks/{slug}/dockerfile-check/``, which creates and charges nothing).

``run --local`` scores the entry on this machine the way a scoring host does: it reads
the sandbox the portal publishes (``GET /benchmarks/{slug}/sandbox/``: the scored
container's spec, its limits, the supervisor's digest, the practice cohort), downloads
and checks the supervisor, builds the environment image with ``docker build``, runs
``build.sh`` in it as the build worker does (root in ``/submission``, every capability
dropped, no privilege gain), commits the result, stages the practice images under fresh
names with a manifest, and starts the image under the supervisor in the published
container spec as far as this client's own fixed template allows (limits and the
in-container command only; see :func:`create_args`). A portal at a plain ``http://``
address other than this machine's is refused unless ``--insecure-http`` says otherwise.
It prints what the submission page shows (verdict, matches,
wall time, resource readings, log tails) and where this machine cannot be the scoring
host. Docker is driven through its command line (``docker``), never a library.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import ipaddress
import json
import platform as platform_module
import re
import secrets
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from podium_cli import judge, show
from podium_cli.api import Client
from podium_cli.errors import EXIT_NOT_PASSED, EXIT_OK, CliError
from podium_cli.pack import pack_folder
from podium_policy.verdict import Verdict

LABEL = "podium.local"
SUPERVISOR_NAME = "supervise"
DOCKER = "docker"


# Docker, through its command line ------------------------------------------------------


@dataclass(frozen=True)
class Completed:
    code: int
    out: bytes
    err: bytes


class Docker:
    """``docker ARGS...``; the tests replace it with a fake."""

    def __init__(self, program: str = DOCKER) -> None:
        self.program = program

    def __call__(
        self,
        *args: str,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        stream: bool = False,
    ) -> Completed:
        command = [self.program, *args]
        try:
            if stream:  # its output goes straight to the terminal (a build's log)
                finished = subprocess.run(command, input=stdin, timeout=timeout_s, check=False)  # noqa: S603
                return Completed(finished.returncode, b"", b"")
            done = subprocess.run(  # noqa: S603
                command, input=stdin, capture_output=True, timeout=timeout_s, check=False
            )
        except FileNotFoundError as exc:
            raise CliError(
                f"`{self.program}` was not found: a local run needs the Docker command line "
                "and a running Docker Engine."
            ) from exc
        return Completed(done.returncode, done.stdout, done.stderr)

    def check(self, *args: str, stdin: bytes | None = None) -> bytes:
        done = self(*args, stdin=stdin)
        if done.code != 0:
            message = done.err.decode(errors="replace").strip() or f"exit status {done.code}"
            raise CliError(f"docker {args[0]} failed: {message}")
        return done.out


def engine_platform(docker: Docker) -> str:
    """The local engine's platform, ``linux/amd64`` or ``linux/arm64``."""
    out = docker.check("version", "--format", "{{.Server.Os}}/{{.Server.Arch}}")
    return out.decode().strip()


# The container's arguments: a fixed template, and from the portal its limits only ---------
#
# The portal publishes the scored container's spec (and the build container's) so that a
# local run is the scored one. But a spec is the portal's word, and what it could ask of
# this machine's engine (a bind of /, a capability, --privileged, the host's network, a
# device, a GPU through an environment variable) reaches far beyond the container. So
# the arguments are this client's own template. The spec may give limits (memory, swap,
# PIDs, CPUs, the OOM score, tmpfs sizes and inode caps, the log cap) and what runs
# inside the container (entrypoint, command, working folder), which the portal decides
# anyway through the supervisor it hands out; every other key it may only repeat with
# the template's value. Anything else stops the run before anything is created.

SUPERVISOR_TARGET = "/podium/supervise"  # where the scored container sees the supervisor
INPUT_TARGET = "/contest/input"  # and the staged practice input
_NO_HEALTHCHECK = {"test": ["NONE"]}
# What the sandbox of each container is, whatever the spec says.
RUN_TEMPLATE: dict[str, Any] = {
    "user": "0:0",  # the supervisor's first instructions; it drops to the entrant's uid
    "network_mode": "none",
    "read_only": True,
    "cap_drop": ["ALL"],
    "cap_add": ["SETUID", "SETGID", "SETPCAP"],  # for the supervisor's drop only
    "security_opt": ["no-new-privileges"],
    "healthcheck": _NO_HEALTHCHECK,
    "environment": [],
    "labels": {},
    "init": False,
}
BUILD_TEMPLATE: dict[str, Any] = {
    "user": "0",
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "healthcheck": _NO_HEALTHCHECK,
    "labels": {},
}
# Limits: spec key -> docker create flag.
_LIMIT_FLAGS = {
    "pids_limit": "--pids-limit",
    "mem_limit": "--memory",
    "memswap_limit": "--memory-swap",
    "oom_score_adj": "--oom-score-adj",
    "cpuset_cpus": "--cpuset-cpus",
    "nano_cpus": "--cpus",
}
# The least each may be: -1 is "no limit" where the engine takes it; a local run never
# lowers its OOM score (that would spare it over this machine's own processes).
_LIMIT_FLOORS = {
    "pids_limit": -1,
    "mem_limit": 1,
    "memswap_limit": -1,
    "oom_score_adj": 0,
    "nano_cpus": 1,
}
_CPUSET = re.compile(r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*")
_TMPFS_FLAGS = frozenset({"rw", "ro", "exec", "noexec", "suid", "nosuid", "dev", "nodev"})
_TMPFS_VALUES = {
    "size": re.compile(r"[0-9]+[kmg]?"),
    "nr_inodes": re.compile(r"[0-9]+[kmg]?"),
    "uid": re.compile(r"[0-9]{1,10}"),
    "gid": re.compile(r"[0-9]{1,10}"),
    "mode": re.compile(r"[0-7]{3,4}"),
}
_LOG_OPTIONS = {"max-size": re.compile(r"[0-9]+[kmg]?"), "max-file": re.compile(r"[0-9]{1,4}")}
_PATH = re.compile(r"/[A-Za-z0-9._/-]*")
_NEVER = (
    "a local run never takes the user, network, capabilities, security options, mounts, "
    "devices or environment from a portal"
)


def _refused(key: str, value: Any, why: str) -> CliError:
    shown = json.dumps(value)[:200]
    return CliError(
        f"The sandbox the portal published sets `{key}` to {shown}: {why}. Nothing was "
        "run; if the portal is yours and changed its sandbox, update podium."
    )


def _limit(key: str, value: Any) -> str:
    """A limit's value as its flag takes it; refused when it is not a plain limit."""
    if key == "cpuset_cpus":
        if isinstance(value, str) and _CPUSET.fullmatch(value):
            return value
        raise _refused(key, value, "it is not a CPU list like 0-3,8")
    if not isinstance(value, int) or isinstance(value, bool):
        raise _refused(key, value, "a limit is a whole number")
    if value < _LIMIT_FLOORS[key]:
        raise _refused(key, value, f"it is below {_LIMIT_FLOORS[key]}")
    if key == "oom_score_adj" and value > 1000:
        raise _refused(key, value, "an OOM score is at most 1000")
    return f"{value / 1e9:g}" if key == "nano_cpus" else str(value)


def _tmpfs(value: Any) -> list[str]:
    """``--tmpfs PATH:OPTIONS`` for each of the spec's tmpfs mounts: in-container memory
    with its size and inode cap, no other option."""
    if not isinstance(value, dict):
        raise _refused("tmpfs", value, "it is not a map of paths to options")
    args: list[str] = []
    for path, options in value.items():
        if not (isinstance(path, str) and _PATH.fullmatch(path) and ".." not in path):
            raise _refused("tmpfs", value, f"{path!r} is not a plain absolute path")
        for option in str(options).split(","):
            name, equals, setting = option.partition("=")
            pattern = _TMPFS_VALUES.get(name)
            plain = not equals and name in _TMPFS_FLAGS
            if not plain and not (equals and pattern and pattern.fullmatch(setting)):
                raise _refused("tmpfs", value, f"the option {option!r} is not a tmpfs limit")
        args += ["--tmpfs", f"{path}:{options}"]
    return args


def _log_config(value: Any) -> list[str]:
    if not isinstance(value, dict) or value.get("type", "json-file") != "json-file":
        raise _refused("log_config", value, "only the json-file log driver is taken")
    args = ["--log-driver", "json-file"]
    for name, setting in dict(value.get("config") or {}).items():
        pattern = _LOG_OPTIONS.get(name)
        if pattern is None or not pattern.fullmatch(str(setting)):
            raise _refused("log_config", value, f"the log option {name!r} is not a cap")
        args += ["--log-opt", f"{name}={setting}"]
    return args


def _words(key: str, value: Any) -> list[str]:
    if not (isinstance(value, list) and all(isinstance(word, str) for word in value)):
        raise _refused(key, value, "it is not a list of words")
    return list(value)


@dataclass(frozen=True)
class Bind:
    """A bind mount this client makes: a local path, read-only, where the container
    sees it; the spec's mount of the same target names the source by ``placeholder``."""

    source: str
    target: str
    placeholder: str


def create_args(
    spec: dict[str, Any],
    *,
    image: str,
    template: dict[str, Any],
    label: str,
    network: str | None = None,
    binds: Sequence[Bind] = (),
) -> list[str]:
    """``docker create`` arguments for the container ``spec`` (the Docker SDK's names, as
    the portal publishes it) describes, built from ``template``, ``binds`` (read-only),
    ``network`` (when the template has none) and this client's label, with only the
    spec's limits and in-container command taken. A spec key of the template's with
    another value, a mount other than ``binds``, or a key this client does not take
    stops the run (:class:`CliError`) before anything is created."""
    settings = {**template, **({"network_mode": network} if network else {})}
    limits: list[str] = []
    command: list[str] = []
    entrypoint: list[str] | None = None
    working_dir: str | None = None
    for key, value in spec.items():
        if key == "image":
            continue
        if key in template:
            if value != template[key]:
                raise _refused(key, value, f"this client's sandbox has {template[key]!r}; {_NEVER}")
        elif key == "mounts":
            wanted = [
                {"Type": "bind", "Source": b.placeholder, "Target": b.target, "ReadOnly": True}
                for b in binds
            ]
            if value != wanted:
                raise _refused(key, value, f"this client binds only its own files; {_NEVER}")
        elif key in _LIMIT_FLAGS:
            limits += [_LIMIT_FLAGS[key], _limit(key, value)]
        elif key == "tmpfs":
            limits += _tmpfs(value)
        elif key == "log_config":
            limits += _log_config(value)
        elif key == "command":
            command = _words(key, value)
        elif key == "entrypoint":
            entrypoint = _words(key, value)
        elif key == "working_dir":
            if not (isinstance(value, str) and _PATH.fullmatch(value)):
                raise _refused(key, value, "it is not a plain absolute path")
            working_dir = value
        else:
            raise _refused(key, value, f"this client does not take that setting; {_NEVER}")
    args = [
        "--user", str(settings["user"]),
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        "--no-healthcheck",
        "--label", label,
    ]  # fmt: skip
    for capability in settings.get("cap_add", []):
        args += ["--cap-add", str(capability)]
    if "network_mode" in settings:
        args += ["--network", str(settings["network_mode"])]
    if settings.get("read_only"):
        args += ["--read-only"]
    for bind in binds:
        args += ["--mount", f"type=bind,source={bind.source},target={bind.target},readonly"]
    if working_dir is not None:
        args += ["--workdir", working_dir]
    args += limits
    if entrypoint is not None:
        args += ["--entrypoint", entrypoint[0] if entrypoint else ""]
        command = entrypoint[1:] + command
    return [*args, image, *command]


def builder_args(published: dict[str, Any], image: str, network: str) -> list[str]:
    """``docker create`` arguments of the container that runs build.sh."""
    return create_args(
        published["build"],
        image=image,
        template=BUILD_TEMPLATE,
        label=f"{LABEL}=build",
        network=network,
    )


def scored_args(
    published: dict[str, Any], image: str, supervisor: str, input_dir: str
) -> list[str]:
    """``docker create`` arguments of the scored container."""
    placeholders = published["placeholders"]
    return create_args(
        published["container"],
        image=image,
        template=RUN_TEMPLATE,
        label=f"{LABEL}=run",
        binds=[
            Bind(supervisor, SUPERVISOR_TARGET, placeholders["supervisor"]),
            Bind(input_dir, INPUT_TARGET, placeholders["input"]),
        ],
    )


# validate --------------------------------------------------------------------------------


def dockerfile_for(folder: Path, given: str | None) -> Path | None:
    """The Dockerfile to judge: ``--dockerfile``, else ``DIR/Dockerfile``, else none."""
    if given:
        path = Path(given)
        if not path.is_file():
            raise CliError(f"{given}: no such Dockerfile.")
        return path
    default = folder / "Dockerfile"
    return default if default.is_file() else None


def entry_problems(folder: Path) -> list[str]:
    """What the portal would refuse in the folder's top level, or the scored run would
    trip on: no ``run`` nor ``build.sh``; a ``run`` that is not an executable file for
    the run's non-root user."""
    problems: list[str] = []
    run = folder / "run"
    build = folder / "build.sh"
    if not run.exists() and not build.exists():
        problems.append("The folder needs a `build.sh` or a `run` at its top level.")
    if run.is_symlink() or (run.exists() and not run.is_file()):
        problems.append("`run` must be a regular file.")
    elif run.is_file() and not run.stat().st_mode & 0o001:
        problems.append(
            "`run` is not executable by others (mode "
            f"{run.stat().st_mode & 0o777:o}); the scored run's user is not you: chmod 755 run."
        )
    if build.exists() and not build.is_file():
        problems.append("`build.sh` must be a regular file.")
    return problems


def validate(args: argparse.Namespace, client: Client) -> int:
    folder = Path(args.folder)
    if not folder.is_dir():
        raise CliError(f"{folder}: no such folder.")
    failed = False
    detail = client.get_json(f"/benchmarks/{args.benchmark}/")
    if detail.get("kind") == "estimation":
        raise CliError(
            f"{args.benchmark} is a metered-estimation phase: it takes no entry folder. Check "
            "the tarball `whest package` makes with `podium validate ARCHIVE`."
        )
    with tempfile.TemporaryDirectory(prefix="podium-") as scratch:
        archive = Path(scratch) / "source.tar.gz"
        files = pack_folder(folder, archive)
        size = archive.stat().st_size
    limit = int(detail["max_upload_bytes"])
    if size > limit:
        print(
            f"FAIL  archive: {show.size(size)} packed; this benchmark takes at most {limit:,} bytes"
        )
        failed = True
    else:
        print(
            f"ok    archive: {show.plural(files, 'file')}, {show.size(size)} of {show.size(limit)}"
        )
    problems = entry_problems(folder)
    for problem in problems:
        print(f"FAIL  entry: {problem}")
    if not problems:
        found = [name for name in ("run", "build.sh") if (folder / name).is_file()]
        print(f"ok    entry: {' and '.join(found)} at the top level")
        if "run" not in found:
            print("note  entry: no `run` yet: build.sh must make /submission/run, executable")
    failed = failed or bool(problems)
    dockerfile = dockerfile_for(folder, args.dockerfile)
    if dockerfile is None:
        print("skip  Dockerfile: none in the folder; name one with --dockerfile")
    else:
        verdict = client.post_files(
            f"/benchmarks/{args.benchmark}/dockerfile-check/",
            {},
            {"dockerfile": ("Dockerfile", dockerfile)},
        )
        if verdict["ok"]:
            print(f"ok    Dockerfile: {dockerfile} meets the benchmark's policy")
        else:
            failed = True
            print(f"FAIL  Dockerfile: {dockerfile} would be refused:")
            for error in verdict["errors"]:
                where = f"line {error['line']}" if error["line"] is not None else "file"
                print(f"      {dockerfile}:{error['line'] or 0}: {where}: {error['message']}")
    print(
        "Not valid: fix the lines marked FAIL." if failed else "Valid: next, `podium run --local`."
    )
    return EXIT_NOT_PASSED if failed else EXIT_OK


# run --local -----------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def differences(published: dict[str, Any], local_platform: str, *, local_gpus: int) -> list[str]:
    """Where this machine cannot be the scoring host, one sentence each."""
    hardware = published["hardware"]
    found: list[str] = []
    wanted = hardware.get("platform")
    if wanted and wanted != local_platform:
        found.append(
            f"This engine is {local_platform}; the class's hosts are {wanted}: "
            "speed and even the results of numeric code can differ."
        )
    gpus = int(hardware.get("gpus") or 0)
    if gpus and not local_gpus:
        found.append(
            f"The class gives each run {show.plural(gpus, 'GPU')}; this local run has none."
        )
    found.append(
        "A scoring host runs the container alone, on CPUs of its own, with every other "
        "container paused; here it shares the machine with whatever else runs."
    )
    kernel = hardware.get("kernel")
    if kernel and kernel != platform_module.release():
        found.append(f"This kernel is {platform_module.release()}; the hosts' is {kernel}.")
    engine = hardware.get("engine")
    if engine:
        found.append(f"The hosts' Docker Engine is pinned at {engine}.")
    band = published.get("noise_band")
    if band and band.get("percent") is not None:
        found.append(
            f"The class's timing noise is about ±{band['percent']}%; a local time says "
            "nothing finer than that about a scored one."
        )
    return found


def build_context_tar(folder: Path, prefix: str) -> bytes:
    """The folder as an uncompressed tar whose paths start with ``prefix/`` (the way the
    build worker unpacks a source archive into ``/submission``)."""
    with tempfile.TemporaryDirectory(prefix="podium-") as scratch:
        packed = Path(scratch) / "source.tar.gz"
        pack_folder(folder, packed)
        out = io.BytesIO()
        with tarfile.open(packed, "r:gz") as source, tarfile.open(fileobj=out, mode="w") as dest:
            top = tarfile.TarInfo(prefix)
            top.type, top.mode = tarfile.DIRTYPE, 0o755
            dest.addfile(top)
            for member in source.getmembers():
                data = source.extractfile(member) if member.isreg() else None
                member.name = f"{prefix}/{member.name}"
                dest.addfile(member, data)
        return out.getvalue()


def stage_practice(archive: Path, where: Path) -> tuple[Path, list[int]]:
    """Unpack the practice archive and stage its images as a scored run sees them: fresh
    names, a manifest of fresh ids in the answers' order; the references, in that order."""
    unpacked = where / "practice"
    unpacked.mkdir(parents=True)
    with tarfile.open(archive, "r:gz") as source:
        source.extractall(unpacked, filter="data")
    answers = [
        line.split("\t")
        for line in (unpacked / "answers.tsv").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    input_dir = where / "input"
    images = input_dir / "images"
    images.mkdir(parents=True)
    manifest: list[str] = []
    references: list[int] = []
    for name, reference in answers:
        suffix = Path(name).suffix.lower()
        staged = f"{secrets.token_hex(8)}{suffix}"
        shutil.copyfile(unpacked / "images" / name, images / staged)
        (images / staged).chmod(0o644)
        manifest.append(f"{secrets.token_hex(8)}\t{staged}\n")
        references.append(int(reference))
    (input_dir / "manifest.tsv").write_text("".join(manifest), encoding="utf-8")
    for folder in (where, input_dir, images):
        folder.chmod(0o755)
    (input_dir / "manifest.tsv").chmod(0o644)
    return input_dir, references


@dataclass
class LocalRun:
    """What ``podium run --local`` needs around it: the client and Docker."""

    client: Client
    docker: Docker

    def download(self, url: str, dest: Path) -> Path:
        response = self.client.session.get(url, stream=True, timeout=(10, 600))
        if response.status_code != 200:
            raise CliError(f"Could not download {url}: HTTP {response.status_code}.")
        with dest.open("wb") as handle:
            for chunk in response.iter_content(1 << 20):
                handle.write(chunk)
        return dest


def loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_transport(url: str, *, insecure_http: bool) -> None:
    """Refuse a portal reached over plain HTTP, unless on this machine or told to: a local
    run executes the supervisor binary and the sandbox that portal hands out, which anyone
    on the path could swap (the published digest travels the same way)."""
    if urlsplit(url).scheme == "https" or loopback(url) or insecure_http:
        return
    raise CliError(
        f"{url} is plain HTTP: a local run executes the supervisor and the sandbox this "
        "portal sends, which anyone on the way could replace. Use its https:// address, "
        "or pass --insecure-http if you trust the network between you."
    )


def run_local(args: argparse.Namespace, client: Client, docker: Docker | None = None) -> int:
    folder = Path(args.folder)
    if not folder.is_dir():
        raise CliError(f"{folder}: no such folder.")
    check_transport(client.url, insecure_http=args.insecure_http)
    docker = docker or Docker()
    runner = LocalRun(client, docker)
    published = client.get_json(f"/benchmarks/{args.benchmark}/sandbox/")
    # Both containers' arguments, before anything is built: a sandbox this client would
    # not run stops it here (CliError).
    builder_args(published, "-", args.build_network)
    scored_args(published, "-", "-", "-")
    practice = published.get("practice")
    if not practice:
        raise CliError("This benchmark has no practice cohort yet: a local run scores on it.")
    problems = entry_problems(folder)
    if problems:
        raise CliError(" ".join(problems))
    local_platform = engine_platform(docker)
    supervisor_facts = published["supervisor"]
    if not supervisor_facts.get("available"):
        raise CliError("The portal gives no supervisor binary, so a local run cannot use it.")
    if supervisor_facts.get("platform") and supervisor_facts["platform"] != local_platform:
        raise CliError(
            f"The portal's supervisor is built for {supervisor_facts['platform']} and this "
            f"Docker Engine runs {local_platform}: a local run would not be the scored one. "
            "Run it on a machine of that platform."
        )
    with tempfile.TemporaryDirectory(prefix="podium-local-") as scratch_name:
        scratch = Path(scratch_name)
        scratch.chmod(0o755)
        supervisor = runner.download(supervisor_facts["download_url"], scratch / SUPERVISOR_NAME)
        digest = sha256_of(supervisor)
        if digest != supervisor_facts["sha256"]:
            raise CliError(
                "The downloaded supervisor's SHA-256 is not the one the portal published; "
                "nothing was run."
            )
        supervisor.chmod(0o755)
        pinned = supervisor_facts.get("pinned_sha256")
        print(f"Supervisor {digest[:16]} ({supervisor_facts['platform']}), digest checked.")
        if pinned and pinned != digest:
            print(f"Note: the class's hosts pin supervisor {pinned[:16]}, not the portal's copy.")
        tag = f"podium-local/{args.benchmark}:{secrets.token_hex(4)}"
        env_image = f"{tag}-env"
        sub_image = f"{tag}-sub"
        try:
            code = _build_and_score(
                args,
                runner,
                published,
                folder,
                scratch,
                supervisor,
                env_image,
                sub_image,
                local_platform,
            )
        finally:
            for image in (sub_image, env_image):
                if not args.keep_images:
                    docker("image", "rm", "--force", image)
    return code


def _build_and_score(
    args: argparse.Namespace,
    runner: LocalRun,
    published: dict[str, Any],
    folder: Path,
    scratch: Path,
    supervisor: Path,
    env_image: str,
    sub_image: str,
    local_platform: str,
) -> int:
    docker = runner.docker
    practice = published["practice"]
    dockerfile = dockerfile_for(folder, args.dockerfile)
    if dockerfile is None:
        raise CliError(f"No Dockerfile in {folder}; name one with --dockerfile.")
    context = Path(args.context) if args.context else scratch / "context"
    context.mkdir(exist_ok=True)
    print(f"Building the environment from {dockerfile} ...")
    built = docker(
        "build", f"--network={args.build_network}", "--tag", env_image,
        "--file", str(dockerfile.resolve()), str(context), stream=True,
    )  # fmt: skip
    if built.code != 0:
        raise CliError("The environment's docker build failed; see its output above.")
    build_args = builder_args(published, env_image, args.build_network)
    container = docker.check("create", *build_args).decode().strip()
    try:
        docker.check("cp", "-", f"{container}:/", stdin=build_context_tar(folder, "submission"))
        print("Running build.sh as the build worker does ...")
        started = docker(
            "start", "--attach", container, stream=True,
            timeout_s=float(published["limits"]["build_timeout_s"]),
        )  # fmt: skip
        if started.code != 0:
            raise CliError(f"build.sh exited with status {started.code}; see its output above.")
        docker.check("commit", container, sub_image)
    finally:
        docker("rm", "--force", container)
    archive = runner.download(practice["download_url"], scratch / "practice.tar.gz")
    input_dir, references = stage_practice(archive, scratch / "run")
    run_args = scored_args(published, sub_image, str(supervisor), str(input_dir))
    outer_s = float(published["limits"]["outer_timeout_s"])
    print(f"Scoring on the practice cohort ({show.plural(len(references), 'image')}) ...")
    container = docker.check("create", *run_args).decode().strip()
    try:
        docker.check("start", container)
        try:
            waited = docker("wait", container, timeout_s=outer_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            docker("kill", container)
            timed_out = True
        stdout = docker("logs", container)
        state = docker("inspect", "--format", "{{json .State}}", container)
    finally:
        docker("rm", "--force", container)
    if timed_out:
        print(
            f"Verdict: errored\nReason: The run did not finish within the "
            f"{published['limits']['score_timeout_s']}-second limit."
        )
        return EXIT_NOT_PASSED
    oom = bool(json.loads(state.out or b"{}").get("OOMKilled")) if state.code == 0 else False
    if waited.out.strip() not in (b"0", b"") and oom:
        limit = int(published["limits"]["run_memory_bytes"])
        print(
            "Verdict: errored\nReason: "
            f"The run used more than its {limit:,}-byte memory limit and was stopped."
        )
        return EXIT_NOT_PASSED
    try:
        result = judge.parse_line(stdout.out)
    except judge.LineError as exc:
        raise CliError(
            f"The supervisor gave no result ({exc}); on the portal that is a platform fault, "
            f"not yours. Its own words: {stdout.err.decode(errors='replace')[-500:]}"
        ) from exc
    verdict = judge.judge(result, references, int(practice["needed"]))
    # The local container is given no GPU: say so where the class has some.
    _print_outcome(verdict, result, differences(published, local_platform, local_gpus=0))
    return EXIT_OK if verdict.status == "passed" else EXIT_NOT_PASSED


def _print_outcome(verdict: Verdict, result: judge.Result, gaps: Sequence[str]) -> None:
    parts = [f"Verdict: {verdict.status}"]
    if verdict.matches is not None:
        parts.append(f"{verdict.matches}/{verdict.total} matches")
    parts.append(f"wall time {show.wall_time(result.wall_ns)} ({result.wall_ns} ns)")
    print(", ".join(parts))
    print(f"Reason: {verdict.reason}")
    found = judge.readings(result)
    rows = [
        ("CPU user", _seconds(found.get("cpu_user_s"))),
        ("CPU system", _seconds(found.get("cpu_system_s"))),
        ("CPU per wall second", _ratio(found.get("cpu_per_wall"))),
        ("peak memory", _bytes(found.get("memory_peak_bytes"))),
        ("peak processes", str(found.get("pids_peak") or "-")),
        ("warm start", "-" if found.get("prewarm_ms") is None else f"{found['prewarm_ms']:.0f} ms"),
    ]
    print("Resources:")
    for name, value in rows:
        print(f"  {name:<20} {value}")
    for title, tail in (("stdout", result.stdout_tail), ("stderr", result.stderr_tail)):
        text = tail.decode(errors="replace").rstrip()
        print(f"== {title} (tail) ==")
        print(text or "(empty)")
    print("Where this machine differs from a scoring host:")
    for gap in gaps:
        print(f"  - {gap}")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _bytes(value: int | None) -> str:
    return "-" if value is None else show.size(int(value))
