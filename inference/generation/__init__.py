"""The one generation flow behind /v1/chat/completions, /v1/completions and the WebSocket:
plan (planning.py), admit, stream from the engines (engine_stream.py), settle exactly once
(settlement.py), driven by ``use_case.Generation``.
"""
