# syntax=docker/dockerfile:1
# CPU image of the ragmt service (the GPU variant comes with the deployment issue).
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# torch pinned first, so the project's range cannot pull a different build
RUN pip install torch==2.13.0
COPY pyproject.toml README.md ./
COPY models ./models
COPY index_builder ./index_builder
COPY service ./service
RUN pip install .
RUN useradd --create-home --uid 10001 ragmt && mkdir -p /data && chown ragmt /data
USER ragmt
ENV RAGMT_HOST=0.0.0.0 RAGMT_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s CMD curl -fsS http://127.0.0.1:8000/livez || exit 1
CMD ["ragmt", "serve"]
