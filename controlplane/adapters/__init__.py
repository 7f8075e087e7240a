"""LoRA adapters: registry, validation, per-tenant grants and the engines' view of them."""
