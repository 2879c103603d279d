from django.contrib import admin

from portal.notifications.models import NotificationPreference


@admin.register(NotificationPreference)
class NotificationPreferenceAdmin(admin.ModelAdmin[NotificationPreference]):
    list_display = ("user", "verdict_emails", "announcement_emails")
    list_filter = ("verdict_emails", "announcement_emails")
    search_fields = ("user__username", "user__email")
    raw_id_fields = ("user",)
