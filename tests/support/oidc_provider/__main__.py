"""python -m tests.support.oidc_provider PORT CONFIG_JSON: migrate, make the users and the
platform's client application named in the config, then serve on 127.0.0.1:PORT.

CONFIG_JSON: {"client_id", "client_secret", "redirect_uri", "users": [{"username",
"email", "password", "verified"}]}. Environment: IDP_DATABASE (an SQLite file), IDP_ISSUER.
"""

import json
import os
import sys

os.environ["DJANGO_SETTINGS_MODULE"] = "tests.support.oidc_provider.settings"

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.core.servers.basehttp import run  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from oauth2_provider.models import Application  # noqa: E402


def main() -> None:
    port, config = int(sys.argv[1]), json.loads(sys.argv[2])
    call_command("migrate", verbosity=0)
    for person in config["users"]:
        user = User.objects.create_user(
            person["username"], email=person["email"], password=person["password"]
        )
        if not person.get("verified", True):
            user.last_name = "unverified"
            user.save()
    Application.objects.create(
        name="LLM platform",
        client_id=config["client_id"],
        client_secret=config["client_secret"],  # hashed on save
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=config["redirect_uri"],
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True,
    )
    print(f"identity provider on port {port}", flush=True)
    run("127.0.0.1", port, get_wsgi_application(), threading=True)


if __name__ == "__main__":
    main()
