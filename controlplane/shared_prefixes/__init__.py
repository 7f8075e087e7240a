"""Shared prefixes: system prompts and tool lists an operator declares public, so every tenant
sending one reuses its KV cache (docs/architecture.md, "Shared prefixes")."""
