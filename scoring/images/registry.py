"""Submission images through a container registry (CNCF Distribution), by digest.

With ``PODIUM_REGISTRY`` set, a submission image leaves its build host only through the
registry, and only by manifest digest:

- the build host pushes it (:func:`publish`) and records the digest reference on the
  submission (``image_ref``, ``registry/podium-entrant/sub-N@sha256:...``);
- a scoring host pulls exactly that reference (:func:`pull_verified`) and refuses it
  (:class:`ImageRefused`, a platform fault) unless the image's ID is the recorded
  ``image_digest``; the run's image is removed from that host afterwards (:func:`discard`);
- retention deletes the manifest from the registry (:func:`delete_manifest`).

A tag in the registry may be pushed over; a digest names one content for good, and the
engine checks what it receives against it. Without a registry (``""``, the default)
nothing here is used: one engine builds and scores.

Docker Engine calls go through ``scoring.engine``; the registry's own HTTP API v2 (which
the engine does not speak for us: deleting, looking up a manifest) is called here.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from dataclasses import dataclass

import requests
from django.conf import settings

from scoring import engine

log = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 30.0
# A reference this module makes and accepts: registry address, repository, manifest digest.
# As for the engine, a first component names a registry only with a "." or ":" in it, or
# as "localhost"; otherwise it is part of a repository on Docker Hub.
_DIGEST_REF = re.compile(
    r"^(?P<registry>localhost|[^/@]*[.:][^/@]*)/(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
    r"@(?P<digest>sha256:[0-9a-f]{64})$"
)
# The manifest kinds a push by the engine stores (image manifests and lists, Docker and OCI);
# the registry answers a lookup only for a kind the client says it accepts.
_MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    )
)


class RegistryError(Exception):
    """The registry could not be reached or refused a request (a platform fault)."""


class ImageRefused(Exception):
    """The image a scoring host got is not the one that was built (a platform fault).

    The message is entrant-safe; the image IDs go to the worker's log.
    """


@dataclass(frozen=True)
class Reference:
    registry: str  # "host:port"
    repository: str  # "podium-entrant/sub-12"
    digest: str  # "sha256:..."

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}@{self.digest}"


def address() -> str:
    """The configured registry as ``host:port`` (any ``http://`` prefix dropped); "" for none."""
    configured = str(settings.PODIUM_REGISTRY).strip().rstrip("/")
    return configured.split("://", 1)[1] if "://" in configured else configured


def parse(ref: str) -> Reference:
    """``ref`` as a digest reference; ValueError for anything else (a tag names no content)."""
    match = _DIGEST_REF.match(ref)
    if match is None:
        raise ValueError(f"not a registry reference by digest: {ref!r}")
    return Reference(match["registry"], match["repository"], match["digest"])


# The build host ------------------------------------------------------------------------


def publish(image_tag: str) -> str:
    """Push the built image ``image_tag`` (``repository:tag``) to the configured registry
    under the same repository and tag; its digest reference.

    The engine pushes a name that starts with the registry's address, so the image gets
    that name for the push and loses it afterwards (its digest name goes with it): the
    build host keeps the image under ``image_tag`` alone, and removing that tag (a
    cancelled build, retention) still removes the image. Raises ``engine.EngineError``
    when the registry cannot be reached or refuses the push.
    """
    registry = address()
    if not registry:
        raise RegistryError("no registry is configured (PODIUM_REGISTRY)")
    repository, _, tag = image_tag.rpartition(":")
    remote = f"{registry}/{repository}"
    engine.tag_image(image_tag, remote, tag)
    try:
        digest = engine.push_image(remote, tag)
    finally:
        discard(f"{remote}:{tag}")
    return str(parse(f"{remote}@{digest}"))


# The scoring host --------------------------------------------------------------------------


def pull_verified(ref: str, image_id: str) -> None:
    """Pull ``ref`` (by digest) onto this engine, and refuse it unless it is ``image_id``.

    Raises ``engine.EngineError`` when the pull fails (the registry is down, the manifest
    is gone), :class:`ImageRefused` when ``ref`` is no digest reference or the pulled
    image's ID is not ``image_id``; what was pulled is then removed again.
    """
    try:
        parse(ref)
    except ValueError:
        log.error("refusing to pull %r: not a reference by digest", ref)
        raise ImageRefused("the recorded submission image is not named by digest") from None
    pulled = engine.pull_image(ref)
    if pulled.id != image_id:
        log.error("pulled %s: image %s, but %s was built", ref, pulled.id, image_id)
        discard(ref)
        raise ImageRefused("the submission image from the registry is not the one that was built")


def check_local(image_tag: str, image_id: str) -> None:
    """For an image never pushed (built before a registry was configured): run it only if
    this engine's ``image_tag`` is the recorded ``image_id``, else :class:`ImageRefused`."""
    found = engine.image_info(image_tag).id
    if not image_id or found != image_id:
        log.error("local image %s is %s, but %r was built", image_tag, found, image_id)
        raise ImageRefused("the submission image on this host is not the one that was built")


def discard(ref: str) -> None:
    """Remove the name ``ref`` from this engine (the image too, unless another name keeps
    it); a failure is logged, never raised: cleaning up changes no verdict."""
    try:
        engine.remove_image(ref)
    except engine.EngineError as exc:
        log.error("could not remove image %s: %s", ref, exc)


# The registry's HTTP API (retention) -------------------------------------------------------


def manifest_exists(ref: str) -> bool:
    """Whether the registry named in ``ref`` still holds its manifest."""
    response = _request("HEAD", parse(ref))
    if response.status_code == 404:
        return False
    _raise_for_status(response, ref)
    return True


def delete_manifest(ref: str) -> bool:
    """Delete ``ref``'s manifest (and the registry's tags that point to it); True when the
    registry deleted it, False when it was already gone.

    Only the manifest goes: its blobs (layers, config) stay on the registry's disk until
    the registry's garbage-collect (``docker-registry garbage-collect CONFIG``), which
    staff run offline (with the registry stopped or read-only), reclaims the unreferenced
    ones. The registry must allow deletes (``storage: delete: enabled: true``).
    """
    response = _request("DELETE", parse(ref))
    if response.status_code == 404:
        return False
    if response.status_code == 405:
        raise RegistryError(f"the registry refuses deletes (storage.delete.enabled): {ref}")
    _raise_for_status(response, ref)
    return True


def _base_url(registry: str) -> str:
    """Plain HTTP for the configured registry when its setting says ``http://``, and for a
    loopback one (as the engine allows); HTTPS otherwise."""
    configured = str(settings.PODIUM_REGISTRY).strip()
    if configured.startswith("http://") and address() == registry:
        return f"http://{registry}"
    host = registry[1 : registry.find("]")] if registry.startswith("[") else registry.split(":")[0]
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return f"{'http' if loopback else 'https'}://{registry}"


def _request(method: str, reference: Reference) -> requests.Response:
    url = f"{_base_url(reference.registry)}/v2/{reference.repository}/manifests/{reference.digest}"
    try:
        return requests.request(
            method, url, headers={"Accept": _MANIFEST_TYPES}, timeout=HTTP_TIMEOUT_S
        )
    except requests.RequestException as exc:
        raise RegistryError(f"the registry {reference.registry} did not answer: {exc}") from exc


def _raise_for_status(response: requests.Response, ref: str) -> None:
    if not response.ok:
        raise RegistryError(f"the registry answered {response.status_code} for {ref}")
