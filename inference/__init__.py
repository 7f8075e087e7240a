"""The OpenAI-compatible API: views, request schemas, SSE and WebSocket streaming, engine client.

API processes import only ``engine.protocol`` from the engine, never torch.
"""
