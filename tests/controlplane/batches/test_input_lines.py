"""Each line of a batch's JSONL input is checked on its own: a bad line becomes an error line
with a code a user can act on, and the good lines around it still run."""

from __future__ import annotations

import io
import json

from controlplane.batches.input_lines import InputLine, LineError, read_input_lines

CHAT = "/v1/chat/completions"


def _line(custom_id="a", url=CHAT, method="POST", body=None) -> str:
    item = {"custom_id": custom_id, "method": method, "url": url}
    item["body"] = {"model": "m", "messages": []} if body is None else body
    return json.dumps(item)


def _read(text: str, **kwargs) -> list:
    return list(read_input_lines(io.BytesIO(text.encode()), endpoint=CHAT, **kwargs))


def test_good_lines_come_out_with_their_line_numbers_and_blank_lines_are_skipped():
    items = _read(_line("a") + "\n\n" + _line("b") + "\n")
    assert items == [
        InputLine(1, "a", {"model": "m", "messages": []}),
        InputLine(3, "b", {"model": "m", "messages": []}),
    ]


def test_each_kind_of_bad_line_gets_its_own_code_and_the_good_ones_still_come_through():
    lines = [
        "{not json",
        json.dumps(["a list"]),
        json.dumps({"method": "POST", "url": CHAT, "body": {}}),
        _line("get", method="GET"),
        _line("url", url="/v1/embeddings"),
        _line("nobody", body="text"),
        _line("good"),
        _line("good"),
    ]
    items = _read("\n".join(lines))
    codes = [(i.line, i.code if isinstance(i, LineError) else "ok") for i in items]
    assert codes == [
        (1, "invalid_json_line"),
        (2, "invalid_json_line"),
        (3, "missing_required_parameter"),
        (4, "invalid_method"),
        (5, "invalid_url"),
        (6, "missing_required_parameter"),
        (7, "ok"),
        (8, "duplicate_custom_id"),
    ]
    assert items[4].custom_id == "url" and "/v1/chat/completions" in items[4].message


def test_a_line_longer_than_the_cap_is_an_error_and_reading_goes_on_after_it():
    long_line = _line("long", body={"model": "m", "messages": [], "x": "y" * 500})
    items = _read(long_line + "\n" + _line("next"), max_line_bytes=200)
    assert isinstance(items[0], LineError) and items[0].code == "line_too_long"
    assert items[1] == InputLine(2, "next", {"model": "m", "messages": []})


def test_lines_the_api_would_refuse_as_a_body_are_error_lines_not_a_stuck_batch():
    # json.loads recurses once per level: 5,000 levels raised RecursionError, which failed
    # the whole validation task (retried forever, the batch stuck in "validating").
    deep = '{"custom_id": "deep", "x": ' + "[" * 5000 + "]" * 5000 + "}"
    lone = _line("lone\ud800")  # json.dumps escapes it as \ud800, which decodes back alone
    emoji = _line("emoji\U0001f600")  # a pair: text
    in_body = _line("named", body={"model": "m", "messages": [], "user": "\udc00"})
    items = _read("\n".join([deep, lone, emoji, in_body]))
    assert [(i.line, getattr(i, "code", "ok")) for i in items] == [
        (1, "invalid_json_line"),
        (2, "invalid_json_line"),
        (3, "ok"),
        (4, "invalid_json_line"),
    ]
    assert [i.custom_id for i in items] == [None, None, "emoji\U0001f600", "named"]
    assert "`body.user`" in items[3].message
    assert "nested deeper than 64" in items[0].message
    assert "lone UTF-16 surrogate" in items[1].message and "`custom_id`" in items[1].message
    assert items[2].custom_id == "emoji\U0001f600"
