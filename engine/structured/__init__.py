"""Structured outputs: grammars that constrain generated tokens, enforced with a token bitmask.

``spec`` is torch-free (the API imports it to refuse bad specs with a 400); ``compiler``,
``state`` and ``bitmask`` run inside the engine. Nothing is imported here, so importing
``engine.structured.spec`` loads neither torch nor the engine.
"""
