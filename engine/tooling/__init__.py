"""Tools around the engine, never imported by the serving engine itself: the demo checkpoint
factory (demo/), GGUF conversion (gguf_convert.py, gguf_tensors.py) and random LoRA adapters
for tests and benchmarks (random_lora.py)."""
