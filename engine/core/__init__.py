"""Engine core: scheduling and KV cache bookkeeping. Pure Python, no torch, no model."""
