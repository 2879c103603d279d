from django.urls import path

from portal.environments import views

app_name = "environments"

urlpatterns = [
    path("b/<slug:slug>/environments/", views.environment_list, name="list"),
    path("environments/<int:pk>/", views.environment_detail, name="detail"),
    path("environments/<int:pk>/status.json", views.environment_status, name="status"),
    path("environments/<int:pk>/rebuild/", views.environment_rebuild, name="rebuild"),
    path("environments/<int:pk>/remove/", views.environment_remove, name="remove"),
]
