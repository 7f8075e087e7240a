"""The Responses API (/v1/responses): a chat generation underneath.

``serializers`` validates the request; ``items`` turns input items (and the stored conversation
of ``previous_response_id``) into chat messages; ``planning`` makes the chat plan a Responses
plan; ``formatters/responses.py`` turns the engine stream into Response objects and typed
events; ``storage`` keeps finished responses in the control plane (``controlplane.responses``).
"""
