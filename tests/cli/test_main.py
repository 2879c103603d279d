"""The command itself: its help, and that it stays a plain HTTP client."""

from __future__ import annotations

import subprocess
import sys

import pytest

from podium_cli.main import main


def test_help_lists_every_command_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])

    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    for name in ("login", "benchmarks", "env", "submit", "watch", "leaderboard", "quota"):
        assert f"\n    {name}" in out
    assert "exit codes:" in out
    assert "  1    watch: the submission ended without passing" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["login"], ["benchmarks"], ["env"], ["env", "create"], ["env", "list"], ["submit"],
        ["watch"], ["leaderboard"], ["quota"],
    ],
)  # fmt: skip
def test_each_command_has_its_own_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])

    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert out.startswith(f"usage: podium {' '.join(argv)} ")


def test_a_missing_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])

    assert exit_info.value.code == 2
    assert "the following arguments are required: COMMAND" in capsys.readouterr().err


def test_the_client_imports_neither_django_nor_the_portal() -> None:
    probe = (
        "import sys, podium_cli.main\n"
        "roots = {name.split('.')[0] for name in sys.modules}\n"
        "print(sorted(roots & {'django', 'portal', 'scoring'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
