# Podium itself (web and workers); compose.yaml builds it as localhost/podium/portal:latest.
# Neither a registry nor a package index is needed: the base is local (scripts/stack-images
# makes localhost/podium/runtime:bookworm) and the Python packages are the wheels that
# scripts/portal-wheels put in deploy/wheels/ on the host. Another base with Python 3.11
# (--build-arg PYTHON_IMAGE=python:3.11-slim-bookworm, where that can be pulled) gets the
# tools below from apt, which needs the build to have a network.
ARG PYTHON_IMAGE=localhost/podium/runtime:bookworm
FROM ${PYTHON_IMAGE} AS base

# gcc, libc6-dev, make: the static supervisor; jpegtran: staging; iptables, ip: the build
# network's rules.
RUN missing=""; \
    for tool in gcc make jpegtran iptables-restore ip; do \
        command -v "$tool" >/dev/null || missing="$tool"; \
    done; \
    if [ -n "$missing" ]; then \
        apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev make \
            libjpeg-turbo-progs iptables iproute2 && rm -rf /var/lib/apt/lists/*; \
    fi

# The dependencies in a virtual environment of their own (Debian's python3 refuses pip
# installs into itself), from the wheels only, in a stage of its own so that the wheels
# stay out of the image. Podium's code is not installed: it runs from /app (PYTHONPATH),
# so the image holds one copy of it.
FROM base AS venv
COPY deploy/wheels/ /tmp/wheels/
RUN python3 -m venv /opt/podium \
    && /opt/podium/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels \
        /tmp/wheels/*.whl

FROM base AS app
WORKDIR /app
COPY . .
# The Makefile's allow-list lookup is for builds on a host, not for this one.
RUN rm -rf deploy/wheels && PODIUM_BUILD_EGRESS_ALLOW= make scoring/supervisor/supervise scoring/calibrate/calibrate

FROM base
COPY --from=venv /opt/podium /opt/podium
COPY --from=app /app /app
ENV PATH=/opt/podium/bin:$PATH PYTHONPATH=/app DJANGO_SETTINGS_MODULE=portal.settings \
    PYTHONUNBUFFERED=1
WORKDIR /app
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi", "--bind", "0.0.0.0:8000"]
