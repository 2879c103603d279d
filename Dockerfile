# Podium itself (web and workers): docker build -t podium/portal .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev make libjpeg-turbo-progs \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . .
RUN pip install --no-cache-dir . && make scoring/supervisor/supervise
ENV DJANGO_SETTINGS_MODULE=portal.settings PYTHONUNBUFFERED=1
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi", "--bind", "0.0.0.0:8000"]
