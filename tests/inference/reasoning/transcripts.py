"""Outputs of real reasoning models, as their engines detokenize them (special tokens kept
where the model's parser needs them), with the split a client should get.

Written after the published formats: Qwen3's chat template and model cards, DeepSeek-R1's
(whose template ends the prompt with ``<think>\\n``, so its outputs start inside the thinking),
and OpenAI's harmony guide for gpt-oss.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Transcript:
    name: str
    parser: str
    prompt_tail: str  # how the rendered prompt ends: it says whether the output starts thinking
    output: str
    reasoning: str
    content: str


QWEN3_ANSWER = Transcript(
    name="qwen3-answer",
    parser="think",
    prompt_tail="<|im_start|>user\nWhat is 17 * 23?<|im_end|>\n<|im_start|>assistant\n",
    output=(
        "<think>\nOkay, let's see. I need to multiply 17 by 23. Hmm, 17 times 20 is 340, and "
        "17 times 3 is 51. Adding those together gives 340 + 51 = 391. Let me double-check: "
        "23 times 17... 20*17=340, 3*17=51, so 391. Yep.\n</think>\n\n17 × 23 = **391**."
    ),
    reasoning=(
        "Okay, let's see. I need to multiply 17 by 23. Hmm, 17 times 20 is 340, and 17 times "
        "3 is 51. Adding those together gives 340 + 51 = 391. Let me double-check: 23 times "
        "17... 20*17=340, 3*17=51, so 391. Yep."
    ),
    content="17 × 23 = **391**.",
)

QWEN3_TOOL_CALL = Transcript(
    name="qwen3-tool-call",
    parser="think",
    prompt_tail="<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n<|im_start|>assistant\n",
    output=(
        "<think>\nThe user wants the weather in Paris. I have a get_weather function that takes "
        "a city and a unit. They didn't say which unit, so I'll use celsius.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": '
        '"celsius"}}\n</tool_call>'
    ),
    reasoning=(
        "The user wants the weather in Paris. I have a get_weather function that takes a city "
        "and a unit. They didn't say which unit, so I'll use celsius."
    ),
    content=(
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": '
        '"celsius"}}\n</tool_call>'
    ),
)

# enable_thinking=False: the template writes an empty thinking block itself.
QWEN3_NO_THINKING = Transcript(
    name="qwen3-enable-thinking-false",
    parser="think",
    prompt_tail="<|im_start|>assistant\n<think>\n\n</think>\n\n",
    output="Hello! How can I help you today?",
    reasoning="",
    content="Hello! How can I help you today?",
)

# DeepSeek-R1 (0528) and Qwen3-*-Thinking-2507: the prompt opened the thinking.
DEEPSEEK_R1 = Transcript(
    name="deepseek-r1-opened-by-prompt",
    parser="think",
    prompt_tail="<｜User｜>What is the capital of Australia?<｜Assistant｜><think>\n",
    output=(
        "Okay, the user is asking for the capital of Australia. Many people think it's Sydney "
        "because it's the largest city, but the capital is actually Canberra. It was chosen "
        "as a compromise between Sydney and Melbourne.\n</think>\n\nThe capital of Australia "
        "is **Canberra**, not Sydney as is often assumed."
    ),
    reasoning=(
        "Okay, the user is asking for the capital of Australia. Many people think it's Sydney "
        "because it's the largest city, but the capital is actually Canberra. It was chosen as "
        "a compromise between Sydney and Melbourne."
    ),
    content="The capital of Australia is **Canberra**, not Sydney as is often assumed.",
)

# max_tokens ran out before </think>: all of it is thinking, there is no answer.
QWEN3_CUT = Transcript(
    name="qwen3-cut-by-max-tokens",
    parser="think",
    prompt_tail="<|im_start|>assistant\n",
    output="<think>\nLet me think about this carefully. The question asks for the number of </th",
    reasoning="Let me think about this carefully. The question asks for the number of </th",
    content="",
)

GPT_OSS_ANSWER = Transcript(
    name="gpt-oss-answer",
    parser="gpt_oss",
    prompt_tail="<|start|>user<|message|>sum from 1 to 100<|end|><|start|>assistant",
    output=(
        '<|channel|>analysis<|message|>User asks: "sum from 1 to 100". They likely want the sum '
        "of integers from 1 to 100. That is 5050. Provide the formula too.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>The sum of the integers from 1 to 100 is "
        "\\(\\frac{100 \\times 101}{2} = 5050\\).<|return|>"
    ),
    reasoning=(
        'User asks: "sum from 1 to 100". They likely want the sum of integers from 1 to 100. '
        "That is 5050. Provide the formula too."
    ),
    content="The sum of the integers from 1 to 100 is \\(\\frac{100 \\times 101}{2} = 5050\\).",
)

GPT_OSS_TOOL_CALL = Transcript(
    name="gpt-oss-tool-call",
    parser="gpt_oss",
    prompt_tail="<|start|>user<|message|>What's the weather in Tokyo?<|end|><|start|>assistant",
    output=(
        "<|channel|>analysis<|message|>Need to use function get_weather with city Tokyo."
        "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
        '<|constrain|>json<|message|>{"city":"Tokyo","unit":"celsius"}<|call|>'
    ),
    reasoning="Need to use function get_weather with city Tokyo.",
    content=(
        '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Tokyo","unit":"celsius"}}'
        "\n</tool_call>"
    ),
)

ALL = [
    QWEN3_ANSWER,
    QWEN3_TOOL_CALL,
    QWEN3_NO_THINKING,
    DEEPSEEK_R1,
    QWEN3_CUT,
    GPT_OSS_ANSWER,
    GPT_OSS_TOOL_CALL,
]


def odd_chunks(text: str, sizes: tuple[int, ...] = (1, 3, 2, 5, 7, 4, 11)) -> list[str]:
    """``text`` cut in pieces of cycling odd sizes, as a detokenizer's deltas fall: tags and
    multi-character markers land across pieces."""
    pieces, position, turn = [], 0, 0
    while position < len(text):
        size = sizes[turn % len(sizes)]
        pieces.append(text[position : position + size])
        position += size
        turn += 1
    return pieces
