"""The upload form: which ready environment, which kind, the source archive and, where
the benchmark states a validation-data boundary, its confirmation."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from django import forms
from django.db.models import QuerySet

from portal.environments.models import Environment
from portal.submissions.models import Submission
from portal.web.environment_forms import upload_path

SOURCE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")


class EnvironmentChoiceField(forms.ModelChoiceField[Environment]):
    viewer_id: int | None = None

    def label_from_instance(self, obj: Environment) -> str:
        if self.viewer_id is not None and obj.owner_id != self.viewer_id:
            return f"{obj.name} ({obj.owner.get_username()}'s, your teammate)"
        return obj.name


class SubmissionForm(forms.Form):
    environment = EnvironmentChoiceField(
        queryset=Environment.objects.none(),
        empty_label=None,
        help_text="One of your (or your teammates') ready environments on this benchmark.",
    )
    kind = forms.ChoiceField(
        choices=[
            (Submission.OFFICIAL, "Official: scored on the private cohort, uses an attempt"),
            (Submission.PRACTICE, "Practice: the public cohort, off the leaderboard"),
        ],
        initial=Submission.OFFICIAL,
        widget=forms.RadioSelect,
        label="Kind",
    )
    source = forms.FileField(
        label="Source archive",
        help_text=".tar.gz, .tar or .zip with build.sh and run.",
    )
    confirm_boundary = forms.BooleanField(
        required=False,
        label="I confirm that this submission keeps to the validation-data boundary above.",
        help_text="Required for an official upload to a benchmark that states one.",
    )

    def __init__(
        self,
        *args: Any,
        environments: QuerySet[Environment],
        viewer_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        field = cast(EnvironmentChoiceField, self.fields["environment"])
        field.queryset = environments
        field.viewer_id = viewer_id

    def clean_source(self) -> tuple[Path, str]:
        upload = self.cleaned_data["source"]
        name = upload.name or ""
        if not name.lower().endswith(SOURCE_SUFFIXES):
            raise forms.ValidationError("Upload a .tar.gz, .tar or .zip archive.")
        return upload_path(upload), name
