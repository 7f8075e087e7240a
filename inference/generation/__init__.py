"""The one generation flow behind /v1/chat/completions, /v1/completions and the WebSocket:
plan (planning.py, or the caller's own planner), admit, stream from the engines
(engine_stream.py), settle exactly once, driven by ``use_case.Generation``.
"""
