"""Stored chat completions: ``store: true`` keeps a finished completion for OpenAI's list,
retrieve, update, delete and messages endpoints (controlplane/chat_store holds them)."""
