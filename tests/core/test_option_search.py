"""The converted engines' option search (studio/core/engines/conversion.py, ``search_options``), on a scripted
converter: which attempt's result comes back when the defaults are refused, when an option set converts but is
judged wrong, and when an earlier shape's winning flags (``first``) are refused at this one. The expected answers
are written by hand from the rules in its docstring; the real converters' searches are tested beside their
engines (test_converter_options, test_litert_tf_ops, test_litert_static_shapes)."""

from __future__ import annotations

import pytest

from studio.core.engines.conversion import ConversionFailed, OptionSet, search_options

A = OptionSet(("-a",), {}, "option a")
B = OptionSet(("-b",), {}, "option b")


def _converter(outcomes: dict[tuple[str, ...], str]):
    """``convert`` that refuses ("refused"), or converts to a file judged "good" or "wrong", per flag set."""
    calls: list[tuple[str, ...]] = []

    def convert(options: OptionSet) -> dict:
        calls.append(tuple(options.flags))
        outcome = outcomes[tuple(options.flags)]
        if outcome == "refused":
            raise ConversionFailed(f"refused with {options.flags}", {"ok": False, "error": "refused"})
        return {"ok": True, "file": outcome, "flags": list(options.flags)}

    def judge(info: dict) -> str | None:
        return None if info["file"] == "good" else "the converted file fails at run"

    return convert, judge, calls


def test_a_good_option_set_wins_after_refused_defaults():
    convert, judge, calls = _converter({(): "refused", ("-a",): "wrong", ("-b",): "good"})
    info = search_options(convert, lambda info, refused: [A, B], judge=judge)
    assert info["flags"] == ["-b"] and calls == [(), ("-a",), ("-b",)]


def test_refused_defaults_and_only_wrong_files_return_the_first_file_that_converted():
    """Not "cannot convert": the file an option set wrote is what the user gets, and its run says what is wrong."""
    convert, judge, calls = _converter({(): "refused", ("-a",): "wrong", ("-b",): "wrong"})
    info = search_options(convert, lambda info, refused: [A, B], judge=judge)
    assert info["flags"] == ["-a"] and [a["converted"] for a in info["attempts"]] == [False, True, True]
    assert not any(a["ok"] for a in info["attempts"])


def test_never_converted_raises_with_every_attempt():
    convert, judge, _ = _converter({(): "refused", ("-a",): "refused"})
    with pytest.raises(ConversionFailed) as raised:
        search_options(convert, lambda info, refused: [A], judge=judge)
    assert [a["options"] for a in raised.value.info["attempts"]] == [[], ["-a"]]


def test_converted_defaults_judged_wrong_stay_the_result():
    convert, judge, _ = _converter({(): "wrong", ("-a",): "wrong"})
    info = search_options(convert, lambda info, refused: [A], judge=judge)
    assert info["flags"] == []


def test_refused_first_flags_fall_back_to_the_converters_defaults():
    """``first`` (an earlier input shape's winning flags) refused at this shape: the defaults are tried before any
    proposal, and win when good."""
    convert, judge, calls = _converter({("-b",): "refused", (): "good", ("-a",): "good"})
    info = search_options(convert, lambda info, refused: [A], judge=judge, first=B)
    assert info["flags"] == [] and calls == [("-b",), ()]
