"""Output validation and the verdict of a scored run (pure: no database, no Docker)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podium_policy.verdict import InvalidOutput, Verdict, count_matches, decide, parse_predictions


def encode(values: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


REFERENCES = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]


def run(
    output: bytes | None = None,
    *,
    output_error: str = "",
    exit_code: int | None = 0,
    signal: int | None = None,
    killed: bool = False,
    references: Sequence[int] = REFERENCES,
    needed: int = 9,
) -> Verdict:
    return decide(
        output=encode(references) if output is None and not output_error else output,
        output_error=output_error,
        exit_code=exit_code,
        signal=signal,
        killed=killed,
        references=references,
        needed=needed,
    )


# parse_predictions ----------------------------------------------------------------------


def test_parses_little_endian_int32_rows() -> None:
    assert parse_predictions(bytes([7, 0, 0, 0, 0xE7, 0x03, 0, 0]), 2) == [7, 999]
    assert parse_predictions(b"", 0) == []


@pytest.mark.parametrize("length", [0, 39, 41, 44])
def test_refuses_a_wrong_length_saying_what_was_expected(length: int) -> None:
    with pytest.raises(InvalidOutput) as caught:
        parse_predictions(b"\x00" * length, 10)
    assert str(caught.value) == f"The output has {length} bytes; 4 x 10 = 40 were expected."


@pytest.mark.parametrize(
    ("value", "shown"), [(1000, "1000"), (-1, "-1"), (2**31 - 1, "2147483647")]
)
def test_refuses_a_class_outside_the_range_naming_the_row(value: int, shown: str) -> None:
    data = encode([0, 999, value, 5000])
    with pytest.raises(InvalidOutput) as caught:
        parse_predictions(data, 4)
    assert str(caught.value) == f"Row 3 holds {shown}, outside [0, 999]."


def test_big_endian_output_is_invalid() -> None:
    with pytest.raises(InvalidOutput, match="Row 1 holds 16777216"):
        parse_predictions(struct.pack(">i", 1), 1)


def test_negative_rows_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        parse_predictions(b"", -1)


@settings(max_examples=200)
@given(st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=50))
def test_parse_accepts_exactly_the_in_range_values(values: list[int]) -> None:
    data = encode(values)
    if all(0 <= v <= 999 for v in values):
        assert parse_predictions(data, len(values)) == values
    else:
        with pytest.raises(InvalidOutput):
            parse_predictions(data, len(values))


@settings(max_examples=200)
@given(data=st.binary(max_size=64), rows=st.integers(min_value=0, max_value=20))
def test_arbitrary_bytes_either_parse_or_raise_invalid_output(data: bytes, rows: int) -> None:
    try:
        predictions = parse_predictions(data, rows)
    except InvalidOutput as exc:
        assert str(exc).endswith(".")
    else:
        assert len(predictions) == rows
        assert all(0 <= p <= 999 for p in predictions)


# count_matches --------------------------------------------------------------------------


def test_counts_equal_positions() -> None:
    assert count_matches([1, 2, 3], [1, 0, 3]) == 2
    assert count_matches([], []) == 0


def test_count_refuses_unequal_lengths() -> None:
    with pytest.raises(ValueError):
        count_matches([1, 2], [1])


# decide -----------------------------------------------------------------------------


def test_a_correct_run_passes() -> None:
    verdict = run()
    assert verdict == Verdict(
        status="passed",
        matches=10,
        total=10,
        reason="10 of 10 predictions match the reference; at least 9 were needed.",
    )


def test_at_the_gate_passes_and_one_below_fails() -> None:
    one_wrong = list(REFERENCES)
    one_wrong[4] = 0
    assert run(encode(one_wrong)).status == "passed"
    two_wrong = list(one_wrong)
    two_wrong[7] = 0
    verdict = run(encode(two_wrong))
    assert verdict.status == "failed"
    assert verdict.matches == 8
    assert verdict.reason == "8 of 10 predictions match the reference; at least 9 are needed."


def test_a_failed_verdict_never_reveals_which_rows_mismatched() -> None:
    wrong = [0] * len(REFERENCES)
    wrong[2] = REFERENCES[2]
    verdict = run(encode(wrong))
    assert verdict.status == "failed"
    for row in range(len(REFERENCES) + 1):
        assert f"row {row}" not in verdict.reason.lower()
    for reference in set(REFERENCES) - {1, 9, 10}:  # numbers that appear in the counts
        assert str(reference) not in verdict.reason


def test_killed_at_the_deadline_errs_even_with_a_perfect_output() -> None:
    verdict = run(killed=True, exit_code=None, signal=9)
    assert verdict.status == "errored"
    assert verdict.reason == "The run did not finish within the time limit."
    assert verdict.matches is None


def test_a_crash_errs_naming_the_exit_code_even_when_the_output_is_perfect() -> None:
    verdict = run(exit_code=3)
    assert verdict.status == "errored"
    assert verdict.reason == "The program exited with code 3."
    assert verdict.matches is None


def test_a_signal_errs_naming_the_signal() -> None:
    verdict = run(exit_code=None, signal=11)
    assert verdict.status == "errored"
    assert verdict.reason == "The program was stopped by signal 11 (SIGSEGV)."
    assert run(exit_code=None, signal=200).reason == "The program was stopped by signal 200."


def test_no_exit_status_at_all_errs() -> None:
    assert run(exit_code=None).status == "errored"


def test_missing_output_errs() -> None:
    verdict = decide(
        output=None,
        output_error="",
        exit_code=0,
        signal=None,
        killed=False,
        references=REFERENCES,
        needed=9,
    )
    assert verdict == Verdict("errored", None, 10, "The program wrote no output file.")


def test_an_unreadable_output_errs_with_the_runners_sentence() -> None:
    verdict = run(encode(REFERENCES), output_error="the output is a symbolic link")
    assert verdict.status == "errored"
    assert verdict.reason == "The output is a symbolic link."


def test_invalid_output_errs_with_the_invalid_output_sentence() -> None:
    verdict = run(encode(REFERENCES[:-1]))
    assert verdict.status == "errored"
    assert verdict.reason == "The output has 36 bytes; 4 x 10 = 40 were expected."
    out_of_range = list(REFERENCES)
    out_of_range[0] = 1000
    assert run(encode(out_of_range)).reason == "Row 1 holds 1000, outside [0, 999]."


def test_needed_outside_the_cohort_is_a_configuration_fault() -> None:
    with pytest.raises(ValueError):
        run(needed=11)
    with pytest.raises(ValueError):
        run(needed=-1)


@settings(max_examples=200)
@given(
    references=st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=40),
    data=st.data(),
)
def test_valid_output_is_judged_by_its_match_count_alone(
    references: list[int], data: st.DataObject
) -> None:
    predictions = data.draw(
        st.lists(
            st.integers(min_value=0, max_value=999),
            min_size=len(references),
            max_size=len(references),
        )
    )
    needed = data.draw(st.integers(min_value=0, max_value=len(references)))
    verdict = run(encode(predictions), references=references, needed=needed)
    matches = sum(p == r for p, r in zip(predictions, references, strict=True))
    assert verdict.matches == matches
    assert verdict.total == len(references)
    assert verdict.status == ("passed" if matches >= needed else "failed")
    assert verdict.reason.startswith(f"{matches} of {len(references)} predictions match")


def test_the_supervisors_output_errors_read_as_sentences_for_the_entrant() -> None:
    common = {"exit_code": 0, "signal": None, "killed": False, "references": [1], "needed": 1}

    missing = decide(output=None, output_error="missing", **common)
    linked = decide(output=None, output_error="not a regular file", **common)

    assert missing.reason == (
        "The program wrote no output file at /contest/output/predictions.i32."
    )
    assert linked.status == "errored" and "not a regular file" in linked.reason


# Canaries (a verification's or a final run's) -------------------------------------------

# Rows 0-5: members judged against the entrant's official answers; rows 6-9: canaries,
# judged against the reference model's answers.
CANARIES = [False] * 6 + [True] * 4
MIXED = [7, 7, 7, 7, 7, 7, 2, 6, 5, 3]


def with_canaries(predictions: Sequence[int]) -> Verdict:
    return decide(
        output=encode(predictions),
        output_error="",
        exit_code=0,
        signal=None,
        killed=False,
        references=MIXED,
        needed=6,
        yardstick="its official answers",
        canaries=CANARIES,
        canaries_needed=4,
    )


def test_a_table_that_knows_the_members_but_not_the_canaries_fails():
    """Hostile: a lookup table answers every member as its official run did and guesses
    the canaries, which no public set holds."""
    verdict = with_canaries([7, 7, 7, 7, 7, 7, 0, 0, 0, 3])

    assert verdict.status == "failed"
    assert verdict.matches == 7
    assert verdict.reason == (
        "6 of 6 predictions match its official answers and 1 of 4 on images no public set"
        " holds match the reference; at least 6 and 4 are needed."
    )


def test_an_entry_that_really_infers_passes_on_both_counts():
    verdict = with_canaries(MIXED)

    assert verdict.status == "passed"
    assert (verdict.matches, verdict.total) == (10, 10)
    assert verdict.reason.endswith("at least 6 and 4 were needed.")


def test_canaries_do_not_make_up_for_members():
    """Right on every canary but off its own official answers: still failed."""
    verdict = with_canaries([7, 7, 7, 7, 7, 1, 2, 6, 5, 3])

    assert verdict.status == "failed"
    assert verdict.reason.startswith("5 of 6 predictions match its official answers and 4 of 4")


def test_canary_thresholds_outside_their_rows_are_a_configuration_fault():
    common = {
        "output": encode(MIXED),
        "output_error": "",
        "exit_code": 0,
        "signal": None,
        "killed": False,
        "references": MIXED,
        "canaries": CANARIES,
    }
    with pytest.raises(ValueError, match="needed must be within"):
        decide(**common, needed=7, canaries_needed=0)
    with pytest.raises(ValueError, match="canaries_needed must be within"):
        decide(**common, needed=0, canaries_needed=5)
    with pytest.raises(ValueError, match="canary flags"):
        decide(**common | {"canaries": [True]}, needed=0)
