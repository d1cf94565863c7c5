# syntax=docker/dockerfile:1
#
# streamworker's runtime image: the `streamworker` command on a slim Python 3.11, as a non-root
# user, with no compiler or build tool in the final stage.
#
#   docker build -t streamworker:0.1.0 .
#   docker run --rm streamworker:0.1.0                     # prints --help
#   docker run --rm streamworker:0.1.0 migrate --db-url postgresql://app@db/billing
#
# Your handlers go into an image of your own built FROM this one (see examples/kubernetes/README.md):
#
#   FROM streamworker:0.1.0
#   COPY billing/ /app/billing/
#   CMD ["run", "billing.app:app"]
#
# Build arguments: PYTHON_IMAGE (pin a digest for reproducible builds) and EXTRAS, the optional
# dependencies installed with the package ("sql" brings SQLAlchemy, Alembic and the PostgreSQL
# driver for idempotency="sql" and `streamworker migrate`; pip only warns about an unknown extra).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- builder: a wheel of streamworker and of every dependency, compilers allowed ----------------
FROM ${PYTHON_IMAGE} AS builder

ARG EXTRAS=sql
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

# Only for dependencies that have no wheel for the target platform (hiredis, pydantic-core or
# psycopg on an unusual architecture); none of it reaches the final stage.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY migrations/ migrations/
# streamworker/migrations is a symlink to ../migrations: COPY keeps it, the wheel build follows it.
COPY streamworker/ streamworker/
RUN pip wheel --wheel-dir /wheels ".[${EXTRAS}]"

# --- runtime: installs those wheels offline; nothing to compile, nothing to build ---------------
FROM ${PYTHON_IMAGE} AS runtime

ARG EXTRAS=sql
# PYTHONUNBUFFERED: log lines reach `kubectl logs` as they are written, not when a buffer fills.
# PYTHONDONTWRITEBYTECODE: the package's bytecode is compiled at install time, and the root file
# system is read-only in the example manifests, so nothing should try to write __pycache__.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore

# The wheels are bind-mounted from the builder, not copied: no layer of this image keeps them.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "streamworker[${EXTRAS}]" \
    && streamworker --version

# A fixed numeric UID/GID, so Kubernetes' runAsNonRoot can verify it and the manifests can name it.
RUN groupadd --system --gid 10001 streamworker \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin streamworker \
    && mkdir /app

# `streamworker run module:app` imports from the current directory: put your package in /app.
WORKDIR /app
USER 10001:10001

LABEL org.opencontainers.image.title="streamworker" \
      org.opencontainers.image.description="Consume Redis Streams with effectively-once processing" \
      org.opencontainers.image.licenses="MIT"

# The worker handles SIGTERM: it stops reading, finishes the batch in hand within
# --shutdown-timeout-s, acks what finished and exits 0. It starts no child processes, so it can
# run as PID 1 without an init. No HEALTHCHECK: Kubernetes probes /healthz and /readyz instead
# (--metrics-port), and Docker's healthcheck would need curl in the image.
STOPSIGNAL SIGTERM
ENTRYPOINT ["streamworker"]
CMD ["--help"]
