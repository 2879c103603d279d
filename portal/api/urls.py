"""The API's routes, included at ``api/`` (docs/api.md describes each one)."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from portal.api import (
    campaign_views,
    contest_views,
    environment_views,
    estimation_views,
    host_views,
    review_views,
    sandbox_views,
    staff_views,
    standings_views,
    submission_views,
    team_views,
    views,
    writeup_views,
)

app_name = "api"

SUBMISSION = "v1/submissions/<int:submission_id>/"
ENVIRONMENT = "v1/environments/<int:environment_id>/"
BENCHMARK = "v1/benchmarks/<slug:slug>/"
CAMPAIGN = "v1/campaigns/<slug:slug>/"
CONTEST = "v1/contests/<slug:slug>/"
ESTIMATION = f"{BENCHMARK}estimation/"
ESTIMATION_ENTRY = "v1/estimation/entries/<int:entry_id>/"

urlpatterns = [
    path("v1/tokens/", views.TokenListCreateView.as_view(), name="tokens"),
    path("v1/tokens/<int:token_id>/", views.TokenDetailView.as_view(), name="token-detail"),
    path("v1/benchmarks/", views.BenchmarkListView.as_view(), name="benchmarks"),
    path(BENCHMARK, views.BenchmarkDetailView.as_view(), name="benchmark-detail"),
    path(f"{BENCHMARK}leaderboard/", views.LeaderboardView.as_view(), name="leaderboard"),
    path(f"{BENCHMARK}attempts/", views.AttemptsView.as_view(), name="benchmark-attempts"),
    path(f"{BENCHMARK}quota/", views.QuotaView.as_view(), name="quota"),
    path(
        f"{BENCHMARK}nominations/",
        standings_views.NominationsView.as_view(),
        name="nominations",
    ),
    path(f"{BENCHMARK}standings/", standings_views.StandingsView.as_view(), name="standings"),
    path(
        f"{BENCHMARK}standings.csv",
        standings_views.StandingsCsvView.as_view(),
        name="standings-csv",
    ),
    path(
        f"{BENCHMARK}standings.json",
        standings_views.StandingsJsonView.as_view(),
        name="standings-json",
    ),
    path(
        f"{BENCHMARK}standings/publish/",
        standings_views.StandingsPublishView.as_view(),
        name="standings-publish",
    ),
    path(
        f"{BENCHMARK}standings/correct/",
        standings_views.StandingsCorrectView.as_view(),
        name="standings-correct",
    ),
    path(
        f"{BENCHMARK}final-rerun/",
        standings_views.FinalRerunView.as_view(),
        name="final-rerun",
    ),
    path(f"{BENCHMARK}team/", team_views.TeamView.as_view(), name="team"),
    path(
        f"{BENCHMARK}team/invitations/",
        team_views.TeamInvitationsView.as_view(),
        name="team-invitations",
    ),
    path(f"{BENCHMARK}team/leave/", team_views.TeamLeaveView.as_view(), name="team-leave"),
    path(
        f"{BENCHMARK}team/members/<str:username>/",
        team_views.TeamMemberView.as_view(),
        name="team-member",
    ),
    path("v1/invitations/", team_views.InvitationListView.as_view(), name="invitations"),
    path(
        "v1/invitations/<int:invitation_id>/accept/",
        team_views.InvitationAcceptView.as_view(),
        name="invitation-accept",
    ),
    path(
        "v1/invitations/<int:invitation_id>/decline/",
        team_views.InvitationDeclineView.as_view(),
        name="invitation-decline",
    ),
    path(f"{BENCHMARK}practice/", views.PracticeView.as_view(), name="practice"),
    path(
        f"{BENCHMARK}dockerfile-check/",
        sandbox_views.DockerfileCheckView.as_view(),
        name="dockerfile-check",
    ),
    path(f"{BENCHMARK}sandbox/", sandbox_views.SandboxView.as_view(), name="sandbox"),
    path(
        f"{BENCHMARK}sandbox/supervisor",
        sandbox_views.SandboxSupervisorView.as_view(),
        name="sandbox-supervisor",
    ),
    path(
        f"{BENCHMARK}practice/download",
        views.PracticeDownloadView.as_view(),
        name="practice-download",
    ),
    path(
        f"{BENCHMARK}environments/",
        environment_views.BenchmarkEnvironmentsView.as_view(),
        name="benchmark-environments",
    ),
    path(
        f"{BENCHMARK}submissions/",
        submission_views.BenchmarkSubmissionsView.as_view(),
        name="benchmark-submissions",
    ),
    path(ENVIRONMENT, environment_views.EnvironmentDetailView.as_view(), name="environment-detail"),
    path(
        f"{ENVIRONMENT}rebuild/",
        environment_views.EnvironmentRebuildView.as_view(),
        name="environment-rebuild",
    ),
    path(
        f"{ENVIRONMENT}build-log",
        environment_views.EnvironmentBuildLogView.as_view(),
        name="environment-build-log",
    ),
    path(SUBMISSION, submission_views.SubmissionDetailView.as_view(), name="submission-detail"),
    path(f"{SUBMISSION}writeup/", writeup_views.WriteUpView.as_view(), name="submission-writeup"),
    path(
        f"{SUBMISSION}writeup/download",
        writeup_views.WriteUpDownloadView.as_view(),
        name="submission-writeup-download",
    ),
    path(
        f"{SUBMISSION}build-log",
        submission_views.SubmissionBuildLogView.as_view(),
        name="submission-build-log",
    ),
    path(
        f"{SUBMISSION}run-log",
        submission_views.SubmissionRunLogView.as_view(),
        name="submission-run-log",
    ),
    path(
        f"{SUBMISSION}source",
        submission_views.SubmissionSourceView.as_view(),
        name="submission-source",
    ),
    path(
        f"{SUBMISSION}cancel/", staff_views.SubmissionCancelView.as_view(), name="submission-cancel"
    ),
    path(
        f"{SUBMISSION}disqualify/",
        staff_views.SubmissionDisqualifyView.as_view(),
        name="submission-disqualify",
    ),
    path(
        f"{SUBMISSION}review/",
        review_views.SubmissionReviewView.as_view(),
        name="submission-review",
    ),
    path(
        f"{SUBMISSION}review/decide/",
        review_views.SubmissionReviewDecideView.as_view(),
        name="submission-review-decide",
    ),
    path(
        f"{SUBMISSION}rescore/",
        staff_views.SubmissionRescoreView.as_view(),
        name="submission-rescore",
    ),
    path("v1/audit/", staff_views.AuditExportView.as_view(), name="audit"),
    path("v1/hosts/", host_views.HostListView.as_view(), name="hosts"),
    path("v1/contests/", contest_views.ContestListView.as_view(), name="contests"),
    path(CONTEST, contest_views.ContestDetailView.as_view(), name="contest-detail"),
    path(
        f"{CONTEST}announcements/",
        contest_views.ContestAnnouncementsView.as_view(),
        name="contest-announcements",
    ),
    path("v1/campaigns/", campaign_views.CampaignListView.as_view(), name="campaigns"),
    path(CAMPAIGN, campaign_views.CampaignDetailView.as_view(), name="campaign-detail"),
    path(f"{CAMPAIGN}rounds/", campaign_views.CampaignRoundsView.as_view(), name="campaign-rounds"),
    path(
        f"{CAMPAIGN}submissions/<int:submission_id>/",
        campaign_views.CampaignSubmissionView.as_view(),
        name="campaign-submission",
    ),
    path(
        f"{CAMPAIGN}submissions/<int:submission_id>/build-log",
        campaign_views.CampaignSubmissionBuildLogView.as_view(),
        name="campaign-submission-build-log",
    ),
    path(
        "v1/rounds/<int:round_id>/entries/<int:entry_id>/report",
        campaign_views.RoundEntryReportView.as_view(),
        name="round-entry-report",
    ),
    path(ESTIMATION, estimation_views.PhaseView.as_view(), name="estimation"),
    path(
        f"{ESTIMATION}entries/",
        estimation_views.EntriesView.as_view(),
        name="estimation-entries",
    ),
    path(f"{ESTIMATION}board/", estimation_views.BoardView.as_view(), name="estimation-board"),
    path(f"{ESTIMATION}final/", estimation_views.FinalView.as_view(), name="estimation-final"),
    path(
        f"{ESTIMATION}suite/",
        estimation_views.SuiteDownloadView.as_view(),
        name="estimation-suite",
    ),
    path(
        ESTIMATION_ENTRY,
        estimation_views.EntryDetailView.as_view(),
        name="estimation-entry",
    ),
    path(
        f"{ESTIMATION_ENTRY}nomination/",
        estimation_views.EntryNominationView.as_view(),
        name="estimation-entry-nomination",
    ),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", views.docs, name="docs"),
]
