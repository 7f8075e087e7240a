"""Decoder-only transformer models loaded straight from Hugging Face safetensors."""

from engine.models.decoder import DecoderLM
from engine.models.loader import load_model

__all__ = ["DecoderLM", "load_model"]
