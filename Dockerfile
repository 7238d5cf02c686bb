# syntax=docker/dockerfile:1
# attention-mt serving image. Only the runtime: onnxruntime, FastAPI, the tokenizer; no torch and
# no training code. Build: `docker build -t attention-mt .` (CPU) or
# `docker build --build-arg VARIANT=cuda --build-arg BASE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04
#  -t attention-mt:cuda .` (CUDA + cuDNN runtime, onnxruntime-gpu).
ARG VARIANT=cpu
# The CUDA variant sets both: --build-arg VARIANT=cuda --build-arg BASE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04
ARG BASE=python:3.11-slim

# ---- the Python base: python:3.11-slim has Python; a CUDA base gets Debian/Ubuntu's python3 ----
FROM ${BASE} AS python-base
SHELL ["/bin/sh", "-eu", "-c"]
RUN if ! command -v python3 >/dev/null || ! python3 -c "import venv, ensurepip" 2>/dev/null; then \
      apt-get update \
      && apt-get install -y --no-install-recommends python3 python3-venv \
      && rm -rf /var/lib/apt/lists/* \
      && ln -sf /usr/bin/python3 /usr/local/bin/python; \
    fi

# ---- build: a virtualenv with the pinned serving dependencies, then the package ----------------
FROM python-base AS build
ARG VARIANT
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# a C compiler for the package's search kernels (service/engine/_native.c) and its onnxruntime
# operators (service/engine/_ortops.c), in this stage only:
# the runtime stage gets the built module, not the compiler. Python's headers come with python:*-slim;
# a distribution's python3 (the CUDA base) needs python3-dev for them.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && if ! python -c "import os, sysconfig; os.stat(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" 2>/dev/null; then \
         apt-get install -y --no-install-recommends python3-dev; \
       fi \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
# dependencies first: this layer is reused until the pins change
COPY requirements/serve-${VARIANT}.txt /tmp/requirements.txt
RUN /opt/venv/bin/pip install -r /tmp/requirements.txt
# then the source: only the serving runtime and the command line
COPY pyproject.toml README.md /src/
COPY service/ /src/service/
COPY cli/ /src/cli/
RUN /opt/venv/bin/pip install --no-deps /src \
    && /opt/venv/bin/python -c "from service.engine import graph_fusion, native; \
assert native.available(), 'the C kernel did not build'; \
assert graph_fusion.library(), 'the onnxruntime operators did not build'"

# ---- runtime ------------------------------------------------------------------------------------
FROM python-base AS runtime
COPY --from=build /opt/venv /opt/venv
COPY bundles/ /app/bundles/
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MT_BUNDLES=/app/bundles \
    MT_HOST=0.0.0.0 \
    MT_PORT=8000
WORKDIR /app
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/livez', timeout=2)"]
# exec form: the server is PID 1 and gets SIGTERM; it finishes in-flight requests for up to 20 s
CMD ["attention-mt", "serve", "--graceful-timeout", "20"]
