from django.urls import path

from portal.contests import views

app_name = "contests"

urlpatterns = [
    path("", views.benchmark_list, name="benchmark_list"),
    path("b/<slug:slug>/", views.benchmark_detail, name="benchmark_detail"),
]
