"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) on the chat generation.

``serializers`` checks the request, ``conversion`` turns it into the chat body it amounts to
(dropping Claude Code's attribution line, ``attribution``), ``planning`` plans that as a chat
of kind "messages", and inference/formatters/messages.py answers in Anthropic's shapes;
``errors`` renders refusals as Anthropic does. docs/api.md lists what is supported.
"""
