"""The provider's claims: the user's email, verified unless their last name says otherwise
(a test can make a provider that vouches for an unverified address)."""

from oauth2_provider.oauth2_validators import OAuth2Validator


class EmailClaimsValidator(OAuth2Validator):
    def get_additional_claims(self, request):
        user = request.user
        return {
            "email": user.email,
            "email_verified": user.last_name != "unverified",
            "name": user.get_username(),
        }
