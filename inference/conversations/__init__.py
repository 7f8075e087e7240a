"""OpenAI's Conversations API: conversations and their items kept on the server per tenant
(controlplane/responses/conversations.py), which a Responses request names with
``conversation`` to continue and extend."""
