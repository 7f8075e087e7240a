"""The management REST API under /api/: deployments and nodes for automation (CI, scripts).

It calls the same fleet services as the admin and ``manage.py deploy``/``scale``/``undeploy``,
with the key's staff owner as the audited actor. Keys need the ``admin`` scope and an owner
who is active staff (``authentication.py``); errors use OpenAI's body, as the /v1 API does.
"""
