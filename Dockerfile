# syntax=docker/dockerfile:1
# One image for every Ultraplane component; the Helm chart picks the component with `args`
# (operator, simulator, serve). Two stages so the runtime image carries no compiler, no build
# tools and no source tree: the builder turns the project and its dependencies into wheels,
# the runtime installs only those wheels, offline.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel is built from (see .dockerignore): tests, docs and the chart stay out.
COPY pyproject.toml README.md ./
COPY ultraplane/ ultraplane/
COPY operator/ operator/
COPY simulator/ simulator/
COPY api/ api/
# Wheels for the project and every runtime dependency, so the runtime stage needs no network
# and no build toolchain (all dependencies ship manylinux wheels for CPython 3.11).
RUN pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="ultraplane" \
      org.opencontainers.image.description="Topology-aware gang scheduling onto AWS Trainium UltraServers: operator, simulator and REST API." \
      org.opencontainers.image.licenses="Apache-2.0"
# The pods run with a read-only root filesystem and only /tmp writable (an emptyDir):
# no bytecode writes at run time (it is compiled at install time below), matplotlib's cache
# and any $HOME use go to /tmp, logs go unbuffered to stdout.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    MPLBACKEND=Agg \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The wheels are bind-mounted, not copied, so they add no layer to the image. pip compiles
# the .pyc files here, while the filesystem is still writable. No version pin is needed
# (DL3013): --no-index installs exactly the wheels the builder made from this source tree.
# hadolint ignore=DL3013
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels ultraplane \
    && groupadd --system --gid 65532 nonroot \
    && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
       --shell /usr/sbin/nologin nonroot
# Numeric user so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
# operator: kopf liveness; api: REST API; simulator: Prometheus metrics.
EXPOSE 8080 9100
ENTRYPOINT ["ultraplane"]
CMD ["operator"]
