"""A byte-level BPE tokenizer trained on local text, with a ChatML chat template.

No tokenizer can be downloaded on the machines this project is built on, so the demo and
test checkpoints carry one trained here, deterministically, on ``corpus.txt`` (Python
standard-library docstrings plus a few multilingual lines, so multi-byte UTF-8 gets merges).
"""

from __future__ import annotations

from pathlib import Path

CORPUS_PATH = Path(__file__).with_name("corpus.txt")

BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|end_of_text|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = [BOS_TOKEN, EOS_TOKEN, IM_START, IM_END, PAD_TOKEN]

# ChatML, the format Qwen models use. Generation stops at <|im_end|>, the tokenizer's EOS.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def train_tokenizer(vocab_size: int = 1024):
    """Train the byte-level BPE on the bundled corpus; returns a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = CORPUS_PATH.read_text(encoding="utf-8")
    # Paragraph-sized chunks keep training deterministic and memory small.
    tok.train_from_iterator(text.split("\n\n"), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS_TOKEN,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[EOS_TOKEN, IM_START],
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
