"""Multi-LoRA serving: PEFT adapters loaded, validated, cached and applied in mixed batches.

Modules (import them directly; this package imports nothing so that the torch-free parts stay
torch-free):
- ``shapes``: the base model's projection sizes that adapters must match (no torch).
- ``validation``: read and check an adapter directory against a base model, checksum (no torch).
- ``loader``: load a validated adapter's A and B matrices as tensors.
- ``ops``: ``lora_delta``, the batched LoRA product grouped by adapter segments.
- ``host_cache``: LRU of loaded adapters in host memory.
- ``slots``: ``max_loras`` device slots of stacked, rank-padded weights, LRU eviction.
- ``manager``: the engine-facing facade (identity -> slot, per-step token slots).
- ``registry``: the adapters a served engine holds, reconciled with the control plane's.
- ``testing``: make random PEFT adapters for tests, the demo and benchmarks.
"""
