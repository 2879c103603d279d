"""Every HTML page's route. The benchmark pages and the account pages keep the namespace
they always had (``contests:``: ``contests:benchmark_detail``, ``contests:account``...);
the campaign, environment and submission pages have theirs (``campaigns:``,
``environments:``, ``submissions:``), given where ``portal/urls.py`` includes them."""

from django.urls import path

from portal.web import accounts as account_views
from portal.web import (
    campaigns,
    contests,
    environments,
    estimation,
    standings,
    submissions,
    teams,
    views,
    writeups,
)

app_name = "contests"

urlpatterns = [
    path("", views.benchmark_list, name="benchmark_list"),
    path("contests/<slug:slug>/", contests.contest_detail, name="contest_detail"),
    path(
        "contests/<slug:slug>/announcements.atom",
        contests.AnnouncementFeed(),
        name="contest_announcements_feed",
    ),
    path("b/<slug:slug>/", views.benchmark_detail, name="benchmark_detail"),
    path("b/<slug:slug>/leaderboard/", views.leaderboard, name="leaderboard"),
    path("b/<slug:slug>/standings/", standings.standings, name="standings"),
    path("b/<slug:slug>/nominations/", standings.nominations, name="nominations"),
    path("submissions/<int:pk>/writeup/", writeups.writeup_upload, name="writeup_upload"),
    path("submissions/<int:pk>/writeup/change", writeups.writeup_change, name="writeup_change"),
    path("submissions/<int:pk>/writeup.pdf", writeups.writeup_pdf, name="writeup_pdf"),
    path("b/<slug:slug>/team/", teams.team, name="team"),
    path("b/<slug:slug>/estimation/entries/", estimation.entry_upload, name="estimation_upload"),
    path("estimation/entries/<int:pk>/", estimation.entry_detail, name="estimation_entry"),
    path(
        "estimation/entries/<int:pk>/nomination",
        estimation.entry_nominate,
        name="estimation_nominate",
    ),
    path("account/", account_views.account, name="account"),
    path("account/tokens/", account_views.token_create, name="token_create"),
    path("account/tokens/<int:pk>/revoke/", account_views.token_revoke, name="token_revoke"),
]

# The campaign pages, under their own namespace (``campaigns:detail``...).
campaign_patterns = [
    path("c/<slug:slug>/", campaigns.campaign_detail, name="detail"),
    path("c/<slug:slug>/rounds/", campaigns.round_list, name="rounds"),
    path(
        "c/<slug:slug>/rounds/<int:round_id>/entries/<int:entry_id>/",
        campaigns.entry_report,
        name="entry_report",
    ),
]

# An entrant's environments (``environments:list``...).
environment_patterns = [
    path("b/<slug:slug>/environments/", environments.environment_list, name="list"),
    path("environments/<int:pk>/", environments.environment_detail, name="detail"),
    path("environments/<int:pk>/status.json", environments.environment_status, name="status"),
    path("environments/<int:pk>/rebuild/", environments.environment_rebuild, name="rebuild"),
    path("environments/<int:pk>/remove/", environments.environment_remove, name="remove"),
]

# An entrant's submissions (``submissions:list``...).
submission_patterns = [
    path("b/<slug:slug>/submissions/", submissions.submission_list, name="list"),
    path("submissions/<int:pk>/", submissions.submission_detail, name="detail"),
    path("submissions/<int:pk>/review", submissions.submission_review, name="review"),
    path("submissions/<int:pk>/status.json", submissions.submission_status, name="status"),
    path("submissions/<int:pk>/source", submissions.submission_source, name="source"),
]
