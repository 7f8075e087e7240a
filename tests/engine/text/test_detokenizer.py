"""Incremental detokenization on the tiny checkpoint's byte-level BPE tokenizer."""

import pytest

from engine.text.detokenizer import IncrementalDetokenizer
from engine.text.tokenizer import ChatTokenizer

TEXT = "Bonjour, ça va? 日本語のテキスト 🙂🚀 naïve café — done."


@pytest.fixture(scope="module")
def tokenizer(tiny_llama):
    return ChatTokenizer(tiny_llama)


def test_pieces_never_split_a_character_and_add_up(tokenizer):
    ids = tokenizer.encode(TEXT)
    prompt = tokenizer.encode("Say something:")
    detok = IncrementalDetokenizer(tokenizer, prompt)
    pieces = [detok.push(t) for t in ids]
    assert "".join(pieces) + detok.flush() == TEXT
    assert all("\ufffd" not in p for p in pieces)
    # The text really does split multi-byte characters across tokens: some tokens emit nothing.
    assert any(p == "" for p in pieces)


def test_each_piece_decodes_byte_exact_utf8(tokenizer):
    ids = tokenizer.encode("🙂🙂🙂")
    detok = IncrementalDetokenizer(tokenizer)
    pieces = [p for p in (detok.push(t) for t in ids) if p]
    assert all(p.encode("utf-8").decode("utf-8") == p for p in pieces)
    assert "".join(pieces) == "🙂🙂🙂"


def test_special_tokens_skipped_or_kept(tokenizer):
    eos = tokenizer.eos_token_id
    ids = [*tokenizer.encode("hi"), eos]
    skipped = IncrementalDetokenizer(tokenizer, skip_special_tokens=True)
    kept = IncrementalDetokenizer(tokenizer, skip_special_tokens=False)
    assert "".join(skipped.push(t) for t in ids) == "hi"
    assert "".join(kept.push(t) for t in ids) == "hi" + tokenizer.eos_token


def test_a_cut_inside_a_character_ends_the_text_before_it_without_u_fffd(tokenizer):
    # What max_tokens does when the last token it allows holds half an emoji.
    ids = tokenizer.encode("ok 🙂")
    cut = next(k for k in range(1, len(ids)) if tokenizer.decode(ids[:k]).endswith("\ufffd"))
    detok = IncrementalDetokenizer(tokenizer)
    text = "".join(detok.push(t) for t in ids[:cut]) + detok.flush()
    assert text == "ok "
    assert detok.text == "ok "


def test_prompt_ending_inside_a_character_gives_the_completion_its_own_text(tokenizer):
    ids = tokenizer.encode("日本語のテキスト")
    split = next(k for k in range(1, len(ids)) if tokenizer.decode(ids[:k]).endswith("\ufffd"))
    prompt, completion = ids[:split], ids[split:]
    detok = IncrementalDetokenizer(tokenizer, prompt)
    text = "".join(detok.push(t) for t in completion) + detok.flush()
    assert text == tokenizer.decode(completion)


class _CountingDecoder:
    """The real tokenizer, counting the ids each decode is given."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.largest = 0

    def decode(self, ids, *, skip_special_tokens=True):
        self.largest = max(self.largest, len(ids))
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def test_a_long_run_of_tokens_without_text_keeps_the_decoded_window_small(tokenizer):
    # A random model samples special tokens (skipped) and ids past the vocabulary for hundreds
    # of steps: each push used to decode every one of them again.
    eos = tokenizer.eos_token_id
    decoder = _CountingDecoder(tokenizer)
    detok = IncrementalDetokenizer(decoder)
    ids = [*tokenizer.encode("Hello there"), *[eos] * 500, *tokenizer.encode(" and 🙂 again")]
    text = "".join(detok.push(t) for t in ids) + detok.flush()
    assert text == tokenizer.decode(ids)
    assert decoder.largest < 40
