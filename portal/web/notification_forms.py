from __future__ import annotations

from django import forms


class NotificationPreferenceForm(forms.Form):
    verdict_emails = forms.BooleanField(
        required=False,
        label="Email me when a submission reaches a verdict",
        help_text=(
            "One mail per verdict (passed, failed, errored, refunded), official and practice: "
            "status, wall time, agreement and a link to the submission."
        ),
    )
    announcement_emails = forms.BooleanField(
        required=False,
        label="Email me the announcements of contests I take part in",
        help_text=(
            "Staff's dated announcements (changes of schedule, new phases, results) of each "
            "contest you have an environment or a submission in."
        ),
    )
