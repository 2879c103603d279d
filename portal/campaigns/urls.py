from django.urls import path

from portal.campaigns import views

app_name = "campaigns"

urlpatterns = [
    path("c/<slug:slug>/", views.campaign_detail, name="detail"),
    path("c/<slug:slug>/rounds/", views.round_list, name="rounds"),
    path(
        "c/<slug:slug>/rounds/<int:round_id>/entries/<int:entry_id>/",
        views.entry_report,
        name="entry_report",
    ),
]
