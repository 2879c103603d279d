"""The environment creation form: a name, a Dockerfile (uploaded or pasted), a context archive."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django import forms
from django.core.files.uploadedfile import TemporaryUploadedFile, UploadedFile

from portal.contests.uploads import MAX_DOCKERFILE_BYTES


def upload_path(upload: UploadedFile) -> Path:
    """Where an upload lies on disk: settings stream every upload to a temporary file."""
    if not isinstance(upload, TemporaryUploadedFile):
        raise forms.ValidationError("The upload could not be stored; please try again.")
    return Path(upload.temporary_file_path())


class EnvironmentForm(forms.Form):
    name = forms.CharField(max_length=100)
    dockerfile_file = forms.FileField(
        required=False,
        label="Dockerfile (upload)",
        help_text="Upload a Dockerfile, or paste it below.",
    )
    dockerfile_text = forms.CharField(
        required=False,
        label="Dockerfile (paste)",
        strip=False,
        widget=forms.Textarea(attrs={"rows": 12, "cols": 80, "spellcheck": "false"}),
    )
    context = forms.FileField(
        required=False,
        label="Build context archive (optional)",
        help_text="A .tar, .tar.gz or .zip unpacked as the build context.",
    )

    def clean_dockerfile_file(self) -> str | None:
        upload = self.cleaned_data.get("dockerfile_file")
        if upload is None:
            return None
        if upload.size is not None and upload.size > MAX_DOCKERFILE_BYTES:
            raise forms.ValidationError("The Dockerfile is larger than 256 KiB.")
        try:
            return bytes(upload.read()).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise forms.ValidationError("The Dockerfile is not UTF-8 text.") from exc

    def clean_context(self) -> Path | None:
        upload = self.cleaned_data.get("context")
        return None if upload is None else upload_path(upload)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        uploaded = cleaned.get("dockerfile_file")
        # A browser sends a textarea with CRLF line ends; a Dockerfile is LF text.
        pasted = (cleaned.get("dockerfile_text") or "").replace("\r\n", "\n")
        if "dockerfile_file" in self.errors:
            return cleaned
        if uploaded and pasted.strip():
            raise forms.ValidationError("Upload a Dockerfile or paste one, not both.")
        if not uploaded and not pasted.strip():
            raise forms.ValidationError("Upload a Dockerfile or paste its text.")
        cleaned["dockerfile"] = uploaded or pasted
        return cleaned

    def dockerfile_field(self) -> str:
        """The field an error about the Dockerfile's content belongs next to."""
        return "dockerfile_file" if self.files.get("dockerfile_file") else "dockerfile_text"


POLICY_LINE = re.compile(r"^line (\d+): ")


@dataclass(frozen=True)
class ListingLine:
    number: int
    text: str
    problems: tuple[str, ...]


def policy_problems(detail: str) -> list[str]:
    """A policy refusal ("line 2: ...; line 7: ...") as one message per violation."""
    return [part.strip() for part in re.split(r";\s+(?=line \d+: )", detail) if part.strip()]


def policy_listing(dockerfile: str, problems: list[str]) -> list[ListingLine]:
    """The Dockerfile as numbered lines, each with the problems reported on it, so the
    page can show every refusal next to the line it is about."""
    by_line: dict[int, list[str]] = {}
    for problem in problems:
        match = POLICY_LINE.match(problem)
        if match:
            by_line.setdefault(int(match.group(1)), []).append(problem[match.end() :])
    lines = dockerfile.rstrip("\n").split("\n")
    return [
        ListingLine(number, text, tuple(by_line.get(number, ())))
        for number, text in enumerate(lines, start=1)
    ]
