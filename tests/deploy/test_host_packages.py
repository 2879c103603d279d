"""``scripts/host-packages``: what `make run` and `make test` install on a Debian machine.

The script runs for real against stand-ins put first on ``PATH``: ``dpkg-query`` (every
package installed but those listed in a file), ``apt-get`` (records its calls and
"installs"), ``id`` (root or not), ``sudo`` (password-less or not) and ``systemctl``.
Nothing is installed on this machine.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "host-packages"

FAKES = {
    "dpkg-query": """\
for pkg; do :; done
grep -qx "$pkg" "$FAKE_STATE/missing" && { echo "no packages found matching $pkg" >&2; exit 1; }
printf 'install ok installed'
""",
    "apt-get": """\
echo "apt-get $*" >>"$FAKE_STATE/calls"
if [ "$1" = update ] && [ -e "$FAKE_STATE/offline" ]; then exit 100; fi
if [ "$1" = install ]; then
    for pkg; do sed -i "/^$pkg\\$/d" "$FAKE_STATE/missing"; done
fi
""",
    "id": """[ "$1" = -u ] && cat "$FAKE_STATE/uid" || exec /usr/bin/id "$@"\n""",
    "sudo": """\
[ "$1" = -n ] && shift
[ -e "$FAKE_STATE/sudo" ] || exit 1
echo "sudo $*" >>"$FAKE_STATE/calls"
exec "$@"
""",
    "systemctl": """echo "systemctl $*" >>"$FAKE_STATE/calls"\n""",
}


@dataclass
class Machine:
    state: Path
    env: dict[str, str]

    def missing(self, *packages: str) -> None:
        (self.state / "missing").write_text("".join(f"{pkg}\n" for pkg in packages))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args], capture_output=True, text=True, env=self.env, timeout=60
        )

    def calls(self) -> list[str]:
        calls = self.state / "calls"
        return calls.read_text().splitlines() if calls.exists() else []

    def still_missing(self) -> list[str]:
        return (self.state / "missing").read_text().split()


@pytest.fixture
def debian(tmp_path: Path) -> Machine:
    """A Debian machine where we are root and every package is installed."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, body in FAKES.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}")
        path.chmod(0o755)
    (state / "uid").write_text("0\n")
    machine = Machine(
        state=state,
        env={
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "FAKE_STATE": str(state),
            "HOME": str(tmp_path),
        },
    )
    machine.missing()
    return machine


def as_user(machine: Machine, *, sudo: bool) -> None:
    (machine.state / "uid").write_text("1000\n")
    if sudo:
        (machine.state / "sudo").touch()


def test_check_names_a_missing_package_and_fails(debian):
    debian.missing("libjpeg-turbo-progs")

    done = debian.run("--check", "run")

    assert done.returncode == 1
    assert "libjpeg-turbo-progs" in done.stderr
    assert "apt-get install libjpeg-turbo-progs" in done.stderr
    assert debian.calls() == []  # --check installs nothing


def test_without_root_or_sudo_it_says_what_to_install_and_fails(debian):
    as_user(debian, sudo=False)
    debian.missing("libjpeg-turbo-progs", "mmdebstrap")

    done = debian.run("run")

    assert done.returncode == 1
    assert "apt-get install mmdebstrap libjpeg-turbo-progs" in done.stderr
    assert debian.calls() == []
    assert debian.still_missing() == ["libjpeg-turbo-progs", "mmdebstrap"]


def test_as_root_it_installs_exactly_what_is_missing_after_one_update(debian):
    debian.missing("libjpeg-turbo-progs")

    done = debian.run("run")

    assert done.returncode == 0, done.stderr
    assert debian.calls() == ["apt-get update -qq", "apt-get install -y -qq libjpeg-turbo-progs"]
    assert debian.still_missing() == []
    assert debian.run("--check", "run").returncode == 0


def test_through_password_less_sudo_it_installs_too(debian):
    as_user(debian, sudo=True)
    debian.missing("libjpeg-turbo-progs")

    done = debian.run("run")

    assert done.returncode == 0, done.stderr
    assert "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjpeg-turbo-progs" in (
        debian.calls()
    )
    assert debian.still_missing() == []


def test_nothing_missing_means_no_apt_get_at_all(debian):
    done = debian.run("run")

    assert done.returncode == 0, done.stderr
    assert debian.calls() == []


def test_run_leaves_the_test_only_packages_to_make_test(debian):
    debian.missing("chromium", "qemu-user-static")

    assert debian.run("run").returncode == 0
    assert debian.calls() == []

    done = debian.run("test")

    assert done.returncode == 0, done.stderr
    assert "apt-get install -y -qq chromium qemu-user-static" in debian.calls()


def test_without_root_missing_test_only_packages_only_warn_that_their_tests_skip(debian):
    as_user(debian, sudo=False)
    debian.missing("chromium")

    done = debian.run("test")

    assert done.returncode == 0, done.stderr
    assert "chromium" in done.stderr and "skip" in done.stderr
    debian.missing("chromium", "libjpeg-turbo-progs")
    done = debian.run("test")
    assert done.returncode == 1
    assert "apt-get install libjpeg-turbo-progs chromium" in done.stderr
    assert debian.calls() == []


def test_installing_the_registry_for_the_tests_keeps_its_own_service_off(debian):
    debian.missing("docker-registry")

    assert debian.run("test").returncode == 0
    assert "systemctl disable --now docker-registry" in debian.calls()


def test_a_failed_update_fails_and_names_what_is_missing(debian):
    debian.missing("libjpeg-turbo-progs")
    (debian.state / "offline").touch()

    done = debian.run("run")

    assert done.returncode == 1
    assert "libjpeg-turbo-progs" in done.stderr
    assert debian.still_missing() == ["libjpeg-turbo-progs"]


def test_make_run_and_make_test_install_their_packages_first():
    for target in ("run", "test"):
        planned = subprocess.run(
            ["make", "-n", "--no-print-directory", target],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        ).stdout.splitlines()
        assert planned[0] == f"scripts/host-packages {target}", planned[:3]


def test_ci_installs_only_its_services_and_gets_the_rest_from_make_test():
    """CI passes only where a newcomer's `make test` would: the packages it installs
    itself are the services it starts, and it runs the README's test command."""
    ci = (REPO / ".ci" / "run").read_text()
    [line] = [line for line in ci.splitlines() if line.startswith("packages=(")]
    assert line == "packages=(postgresql redis-server)"
    assert ci.count("apt-get install") == 1  # that list's
    assert "\nmake test\n" in ci
