"""Text processing that needs no torch: chat templates and tokenization, incremental
detokenization, stop strings, and one sample's output processing built on them.

Shared by the API processes (which must never import torch), the control plane (which checks a
checkpoint's tokenizer when it is registered) and the offline ``LLM``, so each of these has one
implementation.
"""
