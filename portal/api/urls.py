"""The API's routes, included at ``api/`` (docs/api.md describes each one)."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from portal.api import (
    benchmarks,
    campaigns,
    contests,
    environments,
    estimation,
    hosts,
    review,
    sandbox,
    staff,
    standings,
    submissions,
    teams,
    tokens,
    views,
    writeups,
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
    path("v1/tokens/", tokens.TokenListCreateView.as_view(), name="tokens"),
    path("v1/tokens/<int:token_id>/", tokens.TokenDetailView.as_view(), name="token-detail"),
    path("v1/benchmarks/", benchmarks.BenchmarkListView.as_view(), name="benchmarks"),
    path(BENCHMARK, benchmarks.BenchmarkDetailView.as_view(), name="benchmark-detail"),
    path(f"{BENCHMARK}leaderboard/", benchmarks.LeaderboardView.as_view(), name="leaderboard"),
    path(f"{BENCHMARK}attempts/", benchmarks.AttemptsView.as_view(), name="benchmark-attempts"),
    path(f"{BENCHMARK}quota/", benchmarks.QuotaView.as_view(), name="quota"),
    path(
        f"{BENCHMARK}nominations/",
        standings.NominationsView.as_view(),
        name="nominations",
    ),
    path(f"{BENCHMARK}standings/", standings.StandingsView.as_view(), name="standings"),
    path(
        f"{BENCHMARK}standings.csv",
        standings.StandingsCsvView.as_view(),
        name="standings-csv",
    ),
    path(
        f"{BENCHMARK}standings.json",
        standings.StandingsJsonView.as_view(),
        name="standings-json",
    ),
    path(
        f"{BENCHMARK}standings/publish/",
        standings.StandingsPublishView.as_view(),
        name="standings-publish",
    ),
    path(
        f"{BENCHMARK}standings/correct/",
        standings.StandingsCorrectView.as_view(),
        name="standings-correct",
    ),
    path(
        f"{BENCHMARK}final-rerun/",
        standings.FinalRerunView.as_view(),
        name="final-rerun",
    ),
    path(f"{BENCHMARK}team/", teams.TeamView.as_view(), name="team"),
    path(
        f"{BENCHMARK}team/invitations/",
        teams.TeamInvitationsView.as_view(),
        name="team-invitations",
    ),
    path(f"{BENCHMARK}team/leave/", teams.TeamLeaveView.as_view(), name="team-leave"),
    path(
        f"{BENCHMARK}team/members/<str:username>/",
        teams.TeamMemberView.as_view(),
        name="team-member",
    ),
    path("v1/invitations/", teams.InvitationListView.as_view(), name="invitations"),
    path(
        "v1/invitations/<int:invitation_id>/accept/",
        teams.InvitationAcceptView.as_view(),
        name="invitation-accept",
    ),
    path(
        "v1/invitations/<int:invitation_id>/decline/",
        teams.InvitationDeclineView.as_view(),
        name="invitation-decline",
    ),
    path(f"{BENCHMARK}practice/", benchmarks.PracticeView.as_view(), name="practice"),
    path(
        f"{BENCHMARK}dockerfile-check/",
        sandbox.DockerfileCheckView.as_view(),
        name="dockerfile-check",
    ),
    path(f"{BENCHMARK}sandbox/", sandbox.SandboxView.as_view(), name="sandbox"),
    path(
        f"{BENCHMARK}sandbox/supervisor",
        sandbox.SandboxSupervisorView.as_view(),
        name="sandbox-supervisor",
    ),
    path(
        f"{BENCHMARK}practice/download",
        benchmarks.PracticeDownloadView.as_view(),
        name="practice-download",
    ),
    path(
        f"{BENCHMARK}environments/",
        environments.BenchmarkEnvironmentsView.as_view(),
        name="benchmark-environments",
    ),
    path(
        f"{BENCHMARK}submissions/",
        submissions.BenchmarkSubmissionsView.as_view(),
        name="benchmark-submissions",
    ),
    path(ENVIRONMENT, environments.EnvironmentDetailView.as_view(), name="environment-detail"),
    path(
        f"{ENVIRONMENT}rebuild/",
        environments.EnvironmentRebuildView.as_view(),
        name="environment-rebuild",
    ),
    path(
        f"{ENVIRONMENT}build-log",
        environments.EnvironmentBuildLogView.as_view(),
        name="environment-build-log",
    ),
    path(SUBMISSION, submissions.SubmissionDetailView.as_view(), name="submission-detail"),
    path(f"{SUBMISSION}writeup/", writeups.WriteUpView.as_view(), name="submission-writeup"),
    path(
        f"{SUBMISSION}writeup/download",
        writeups.WriteUpDownloadView.as_view(),
        name="submission-writeup-download",
    ),
    path(
        f"{SUBMISSION}build-log",
        submissions.SubmissionBuildLogView.as_view(),
        name="submission-build-log",
    ),
    path(
        f"{SUBMISSION}run-log",
        submissions.SubmissionRunLogView.as_view(),
        name="submission-run-log",
    ),
    path(
        f"{SUBMISSION}source",
        submissions.SubmissionSourceView.as_view(),
        name="submission-source",
    ),
    path(f"{SUBMISSION}cancel/", staff.SubmissionCancelView.as_view(), name="submission-cancel"),
    path(
        f"{SUBMISSION}disqualify/",
        staff.SubmissionDisqualifyView.as_view(),
        name="submission-disqualify",
    ),
    path(
        f"{SUBMISSION}review/",
        review.SubmissionReviewView.as_view(),
        name="submission-review",
    ),
    path(
        f"{SUBMISSION}review/decide/",
        review.SubmissionReviewDecideView.as_view(),
        name="submission-review-decide",
    ),
    path(
        f"{SUBMISSION}rescore/",
        staff.SubmissionRescoreView.as_view(),
        name="submission-rescore",
    ),
    path("v1/audit/", staff.AuditExportView.as_view(), name="audit"),
    path("v1/hosts/", hosts.HostListView.as_view(), name="hosts"),
    path("v1/contests/", contests.ContestListView.as_view(), name="contests"),
    path(CONTEST, contests.ContestDetailView.as_view(), name="contest-detail"),
    path(
        f"{CONTEST}announcements/",
        contests.ContestAnnouncementsView.as_view(),
        name="contest-announcements",
    ),
    path("v1/campaigns/", campaigns.CampaignListView.as_view(), name="campaigns"),
    path(CAMPAIGN, campaigns.CampaignDetailView.as_view(), name="campaign-detail"),
    path(f"{CAMPAIGN}rounds/", campaigns.CampaignRoundsView.as_view(), name="campaign-rounds"),
    path(
        f"{CAMPAIGN}submissions/<int:submission_id>/",
        campaigns.CampaignSubmissionView.as_view(),
        name="campaign-submission",
    ),
    path(
        f"{CAMPAIGN}submissions/<int:submission_id>/build-log",
        campaigns.CampaignSubmissionBuildLogView.as_view(),
        name="campaign-submission-build-log",
    ),
    path(
        "v1/rounds/<int:round_id>/entries/<int:entry_id>/report",
        campaigns.RoundEntryReportView.as_view(),
        name="round-entry-report",
    ),
    path(ESTIMATION, estimation.PhaseView.as_view(), name="estimation"),
    path(
        f"{ESTIMATION}entries/",
        estimation.EntriesView.as_view(),
        name="estimation-entries",
    ),
    path(f"{ESTIMATION}board/", estimation.BoardView.as_view(), name="estimation-board"),
    path(f"{ESTIMATION}final/", estimation.FinalView.as_view(), name="estimation-final"),
    path(
        f"{ESTIMATION}suite/",
        estimation.SuiteDownloadView.as_view(),
        name="estimation-suite",
    ),
    path(
        ESTIMATION_ENTRY,
        estimation.EntryDetailView.as_view(),
        name="estimation-entry",
    ),
    path(
        f"{ESTIMATION_ENTRY}nomination/",
        estimation.EntryNominationView.as_view(),
        name="estimation-entry-nomination",
    ),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", views.docs, name="docs"),
]
