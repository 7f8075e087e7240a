"""Routes of the tenant portal, under /portal/."""

from django.urls import path

from controlplane.portal import sign_in_views, views

app_name = "portal"

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", sign_in_views.PortalLoginView.as_view(), name="login"),
    path("logout/", sign_in_views.PortalLogoutView.as_view(), name="logout"),
    path("sso/start/", sign_in_views.sso_start, name="sso-start"),
    path("sso/callback/", sign_in_views.sso_callback, name="sso-callback"),
    path(
        "invitation/<uidb64>/<token>/",
        sign_in_views.InvitationView.as_view(),
        name="invitation",
    ),
    path("keys/", views.keys, name="keys"),
    path("keys/<int:key_id>/revoke/", views.key_revoke, name="key-revoke"),
    path("usage/", views.usage, name="usage"),
    path("end-users/", views.end_users, name="end-users"),
    path("end-users/<int:end_user_id>/remove/", views.end_user_remove, name="end-user-remove"),
    path("responses/", views.responses, name="responses"),
    path("responses/<str:response_id>/", views.response_detail, name="response-detail"),
    path("chat-completions/", views.chat_completions, name="chat-completions"),
    path(
        "chat-completions/<str:completion_id>/",
        views.chat_completion_detail,
        name="chat-completion-detail",
    ),
    path("members/", views.members, name="members"),
    path("members/<int:member_id>/remove/", views.member_remove, name="member-remove"),
]
