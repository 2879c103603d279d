from django.urls import path

from portal.submissions import views

app_name = "submissions"

urlpatterns = [
    path("b/<slug:slug>/submissions/", views.submission_list, name="list"),
    path("submissions/<int:pk>/", views.submission_detail, name="detail"),
    path("submissions/<int:pk>/review", views.submission_review, name="review"),
    path("submissions/<int:pk>/status.json", views.submission_status, name="status"),
    path("submissions/<int:pk>/source", views.submission_source, name="source"),
]
