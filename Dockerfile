# One image for every Ultraplane component; the Helm chart picks the component with `args`
# (operator, simulator, serve). Two stages so the runtime image carries no build tools and no
# source tree: the builder installs the project and its dependencies into a virtual
# environment (compiling the bytecode), the runtime copies only that environment.
# Plain Dockerfile syntax, so the legacy builder builds it where BuildKit is missing
# (`DOCKER_BUILDKIT=0 docker build .`). BASE is any Debian-like image with python3 >= 3.11 and
# its venv module: python:3.11-slim by default; hack/kind-cluster.sh passes a base it built from
# Debian packages where no registry is reachable.
ARG BASE=python:3.11-slim

FROM ${BASE} AS builder
# A CA bundle for pip, for networks that reach PyPI through a TLS proxy (optional).
ARG PIP_CERT
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the package is built from (see .dockerignore): tests, docs and the chart stay out.
COPY pyproject.toml README.md ./
COPY ultraplane/ ultraplane/
COPY operator/ operator/
COPY simulator/ simulator/
COPY api/ api/
# From /, not /src: there, `python3 -m` would import the project's operator/ folder in place
# of the standard library's operator module.
WORKDIR /
RUN python3 -m venv /opt/ultraplane \
    && /opt/ultraplane/bin/pip install ${PIP_CERT:+--cert "$PIP_CERT"} --no-cache-dir /src \
    && /opt/ultraplane/bin/ultraplane --help >/dev/null

FROM ${BASE} AS runtime
LABEL org.opencontainers.image.title="ultraplane" \
      org.opencontainers.image.description="Topology-aware gang scheduling onto AWS Trainium UltraServers: operator, simulator and REST API." \
      org.opencontainers.image.licenses="Apache-2.0"
# The pods run with a read-only root filesystem and only /tmp writable (an emptyDir):
# no bytecode writes at run time (pip compiled it in the builder), matplotlib's cache and any
# $HOME use go to /tmp, logs go unbuffered to stdout.
ENV PATH=/opt/ultraplane/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    MPLBACKEND=Agg
COPY --from=builder /opt/ultraplane /opt/ultraplane
RUN groupadd --system --gid 65532 nonroot \
    && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
       --shell /usr/sbin/nologin nonroot
# Numeric user so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
# operator: kopf liveness; api: REST API; simulator: Prometheus metrics.
EXPOSE 8080 9100
ENTRYPOINT ["ultraplane"]
CMD ["operator"]
