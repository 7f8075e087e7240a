"""SamplingParams and EngineConfig validation: errors name the field."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.sampling_params import SamplingParams


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n": 0}, "n"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"min_p": 2}, "min_p"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"frequency_penalty": -2.5}, "frequency_penalty"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"min_tokens": 5, "max_tokens": 2}, "min_tokens"),
        ({"logprobs": 21}, "logprobs"),
        ({"prompt_logprobs": -1}, "prompt_logprobs"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"stop": [1]}, "stop"),
        ({"seed": "x"}, "seed"),
        ({"temperature": "hot"}, "temperature"),
        ({"logit_bias": {"5": 1.0}}, "logit_bias"),
        ({"logit_bias": {-1: 1.0}}, "logit_bias"),
        ({"logit_bias": {5: 100.5}}, "logit_bias"),
        ({"logit_bias": {5: float("nan")}}, "logit_bias"),
        ({"logit_bias": [(5, 1.0)]}, "logit_bias"),
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"allowed_token_ids": [3, -1]}, "allowed_token_ids"),
    ],
)
def test_invalid_sampling_values_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}\b"):
        SamplingParams(**kwargs)


def test_normalisations():
    params = SamplingParams(stop="###", top_k=-1, temperature=0)
    assert params.stop == ["###"] and params.top_k == 0 and params.is_greedy


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dtype": "float64"}, "dtype"),
        ({"device": "tpu"}, "device"),
        ({"block_size": 0}, "block_size"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_model_len": -1}, "max_model_len"),
        ({"num_gpu_blocks": 0}, "num_gpu_blocks"),
        ({"scheduling_policy": "lifo"}, "scheduling_policy"),
    ],
)
def test_invalid_engine_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}\b"):
        EngineConfig(model="/some/path", **kwargs)
