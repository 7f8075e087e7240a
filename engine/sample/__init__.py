"""Batched token sampling: penalties, temperature, top-k/top-p/min-p, seeds, logprobs."""

from engine.sample.metadata import SamplingBatch
from engine.sample.sampler import Sampler, SamplerOutput

__all__ = ["Sampler", "SamplerOutput", "SamplingBatch"]
