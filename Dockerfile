# syntax=docker/dockerfile:1
# ragmt images, two targets of one file:
#
#   docker build -t ragmt:gpu .               # the default (last) stage: CUDA runtime base,
#                                             # torch with CUDA, faiss-gpu (the `gpu` extra)
#   docker build -t ragmt:cpu --target cpu .  # Python slim base, CPU torch wheel, faiss-cpu
#
# Both hold the project with its committed default bundle (package data), run as the non-root
# user `ragmt` (uid 10001), keep data and retrieval stores under the volume /data, start through
# docker/entrypoint.sh (waits for Redis when RAGMT_REDIS_URL is set) and check /livez.
# The project is installed into /opt/venv in a build stage; the runtime stage copies only that.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# Ubuntu 24.04: Python 3.12. torch and faiss bring their own CUDA libraries as wheels; the base
# gives the CUDA 12 runtime faiss-gpu-cu12 is built for. The host driver must support the CUDA
# of the torch wheel too (see TORCH_INDEX_URL below).
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
ARG TORCH_VERSION=2.13.0


# ---------------------------------------------------------------------------------- CPU ---
FROM ${PYTHON_IMAGE} AS cpu-build
ARG TORCH_VERSION
# PyPI's default Linux torch wheel is a CUDA build of several GB; this index has the CPU one.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
# torch first and pinned: the project's range (torch>=2.4,<=2.14.1) then keeps this build.
RUN pip install --index-url "$TORCH_INDEX_URL" "torch==$TORCH_VERSION"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY models ./models
COPY index_builder ./index_builder
COPY service ./service
RUN pip install .
RUN for b in semiparametric_bundle baseline_bundle baseline_de_en_bundle; do \
      pip show -f ragmt | grep -q "models/$b/manifest.json" \
      || { echo "the committed bundle models/$b is missing from the package" >&2; exit 1; }; \
    done

FROM ${PYTHON_IMAGE} AS cpu
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH \
    RAGMT_HOST=0.0.0.0 RAGMT_PORT=8000 RAGMT_DATA_DIR=/data RAGMT_STORES_DIR=/data/stores \
    RAGMT_DEVICE=cpu
# g++: the native decoding step (models/native_step.py) is built for the host's CPU when the
# service first loads a model, into ~/.cache/ragmt/native; without it, ort-int8 decodes.
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ \
 && rm -rf /var/lib/apt/lists/*
COPY --from=cpu-build /opt/venv /opt/venv
COPY --chmod=0755 docker/entrypoint.sh docker/wait_for_redis.py docker/healthcheck.py /opt/ragmt/
RUN useradd --create-home --uid 10001 --user-group ragmt \
 && mkdir -p /data/stores && chown -R ragmt:ragmt /data
USER ragmt
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
  CMD ["python", "/opt/ragmt/healthcheck.py"]
ENTRYPOINT ["/opt/ragmt/entrypoint.sh"]
CMD ["ragmt", "serve"]


# ---------------------------------------------------------------------------------- GPU ---
FROM ${CUDA_IMAGE} AS gpu-base
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*

FROM gpu-base AS gpu-build
ARG TORCH_VERSION
# PyPI's torch wheel for Linux is a CUDA build. For an older driver, pick an index of the
# PyTorch project for a CUDA 12 line the driver supports (e.g. .../whl/cu126).
ARG TORCH_INDEX_URL=https://pypi.org/simple
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
RUN python3 -m venv /opt/venv
RUN pip install --index-url "$TORCH_INDEX_URL" "torch==$TORCH_VERSION"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY models ./models
COPY index_builder ./index_builder
COPY service ./service
# faiss-cpu (a base dependency) and faiss-gpu-cu12 (the `gpu` extra) both install the module
# `faiss`; with both present the CPU extension (_swigfaiss.abi3.so) would win the import. So:
# remove faiss-cpu, then reinstall the GPU wheel over the files the removal took with it.
RUN pip install ".[gpu]"
RUN version=$(pip show faiss-gpu-cu12 | sed -n 's/^Version: //p') \
 && test -n "$version" \
 && pip uninstall -y faiss-cpu \
 && pip install --no-deps --force-reinstall "faiss-gpu-cu12==$version"
RUN faiss_dir=$(echo /opt/venv/lib/python3*/site-packages/faiss) \
 && grep -q 'class StandardGpuResources' "$faiss_dir/swigfaiss.py" \
 && ! ls "$faiss_dir"/_swigfaiss.abi3.so 2>/dev/null \
 || { echo "faiss in $faiss_dir is not the GPU build alone" >&2; exit 1; }
RUN for b in semiparametric_bundle baseline_bundle baseline_de_en_bundle; do \
      pip show -f ragmt | grep -q "models/$b/manifest.json" \
      || { echo "the committed bundle models/$b is missing from the package" >&2; exit 1; }; \
    done

FROM gpu-base AS gpu
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH \
    RAGMT_HOST=0.0.0.0 RAGMT_PORT=8000 RAGMT_DATA_DIR=/data RAGMT_STORES_DIR=/data/stores \
    RAGMT_DEVICE=cuda
COPY --from=gpu-build /opt/venv /opt/venv
COPY --chmod=0755 docker/entrypoint.sh docker/wait_for_redis.py docker/healthcheck.py /opt/ragmt/
RUN useradd --create-home --uid 10001 --user-group ragmt \
 && mkdir -p /data/stores && chown -R ragmt:ragmt /data
USER ragmt
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
  CMD ["python", "/opt/ragmt/healthcheck.py"]
ENTRYPOINT ["/opt/ragmt/entrypoint.sh"]
CMD ["ragmt", "serve"]
