"""Incremental detokenization: turn a growing list of token ids into text, piece by piece.

Byte-level BPE splits multi-byte UTF-8 characters across tokens, so decoding one token at a
time would emit U+FFFD halves. This keeps a small window of recent tokens and only emits text
once the window decodes to complete characters (the scheme vLLM and HF's TextStreamer use).
"""

from __future__ import annotations

from typing import Protocol

REPLACEMENT_CHAR = "\ufffd"
# Prompt tokens kept as left context: some tokenizers (SentencePiece) render a token's
# leading space only when something precedes it.
PROMPT_CONTEXT_TOKENS = 5
# Tokens that add no text (special tokens when they are skipped; ids past the tokenizer's
# vocabulary, which a model with a padded embedding table can sample) never move the window,
# so a long run of them made every push decode a longer window: quadratic in the run's length
# (on the GPU benchmark's random model, 21 of the 39 s of a profiled run). After this many the
# run is dropped from the window; it has no text, so the window's text stays the same.
MAX_EMPTY_RUN = 16


class Decoder(Protocol):
    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str: ...


class IncrementalDetokenizer:
    """Detokenizes one sample's generated tokens; ``push`` returns only the new text.

    ``prefix_offset:read_offset`` is the window already turned into text; decoding
    ``prefix_offset:`` and cutting the window's text off the front gives the new text. The
    window advances only when that text is complete, never mid-character.
    """

    def __init__(
        self,
        tokenizer: Decoder,
        prompt_token_ids: list[int] | None = None,
        *,
        skip_special_tokens: bool = True,
    ):
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        context = list((prompt_token_ids or [])[-PROMPT_CONTEXT_TOKENS:])
        if context and self._decode(context).endswith(REPLACEMENT_CHAR):
            # The prompt ends inside a character: its missing bytes belong to the completion's
            # text, not to a character glued onto the prompt.
            context = []
        self._ids: list[int] = context
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self.text = ""  # everything emitted so far

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip)

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes ("" while a character is incomplete)."""
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        full_text = self._decode(self._ids[self._prefix_offset :])
        if full_text == prefix_text and len(self._ids) - self._read_offset >= MAX_EMPTY_RUN:
            del self._ids[self._read_offset :]
            return ""
        if len(full_text) <= len(prefix_text) or full_text.endswith(REPLACEMENT_CHAR):
            return ""
        new_text = full_text[len(prefix_text) :]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        self.text += new_text
        return new_text

    def flush(self) -> str:
        """At the end of generation: the held-back text, less a character left incomplete.

        A length cut can fall between the bytes of one character (an emoji is four bytes,
        often two tokens); its decoded half is U+FFFD, which is no part of what the model
        wrote, so it is dropped rather than ending the text with a replacement character.
        (A model that wrote U+FFFD itself as its very last character loses it too: the bytes
        cannot tell the two apart.)
        """
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        full_text = self._decode(self._ids[self._prefix_offset :])
        self._prefix_offset = self._read_offset = len(self._ids)
        new_text = full_text[len(prefix_text) :] if len(full_text) > len(prefix_text) else ""
        new_text = new_text.rstrip(REPLACEMENT_CHAR)
        self.text += new_text
        return new_text
