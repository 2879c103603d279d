from django.contrib import admin
from django.urls import include, path

from portal.core.login_limits import AdminLoginForm
from portal.web.urls import campaign_patterns, environment_patterns, submission_patterns

admin.site.login_form = AdminLoginForm  # failed sign-ins count as at the site's own form

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("allauth.urls")),
    path("api/", include("portal.api.urls")),
    path("", include("portal.web.urls")),
    path("", include((environment_patterns, "environments"))),
    path("", include((submission_patterns, "submissions"))),
    path("", include((campaign_patterns, "campaigns"))),
]

# Under /api/ an unmatched URL answers in the API's error format; elsewhere the HTML page.
handler404 = "portal.api.views.not_found"
