# maintd: the table-maintenance daemon, with a local Spark driver (OpenJDK 17).
# Build: docker build -t maintd:0.1.0 .      Run: docker run -e MAINTD_STORE__URL=... maintd:0.1.0
#
# The base is pinned by digest: the multi-platform image index of python:3.11.14-slim-bookworm as published
# on Docker Hub (the digest several public projects pin for that tag; check it with
# `docker buildx imagetools inspect python:3.11.14-slim-bookworm`). bookworm ships openjdk-17-jre-headless
# (the next Debian release only ships Java 21), which Spark supports.
ARG BASE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

# -- build: every dependency from the lock files (hash-checked; CI installs the same pins), then maintd ---------
FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/maintd
COPY requirements/runtime.lock requirements/build.lock /src/requirements/
RUN /opt/maintd/bin/pip install --require-hashes --no-deps \
        -r /src/requirements/runtime.lock -r /src/requirements/build.lock
COPY pyproject.toml README.md /src/
COPY maintd /src/maintd
COPY jobs /src/jobs
RUN /opt/maintd/bin/pip install --no-deps --no-build-isolation /src \
    && /opt/maintd/bin/pip uninstall --yes setuptools wheel

# -- runtime: the JRE, tini, nss_wrapper, jemalloc and the virtualenv; no compiler, no pip cache -------------
FROM ${BASE}
# The JRE tracks Debian security updates; pinning its exact version would make every rebuild fail
# once the pinned build leaves the archive. jemalloc is the malloc of the processes that run small plans.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini libnss-wrapper libjemalloc2 \
    && rm -rf /var/lib/apt/lists/* \
    && JAVA_BIN="$(readlink -f /usr/bin/java)" \
    && ln -s "$(dirname "$(dirname "$JAVA_BIN")")" /usr/lib/jvm/default-java \
    && mkdir -p /var/lib/maintd /home/maintd /scratch \
    && chgrp -R 0 /var/lib/maintd /home/maintd /scratch \
    && chmod -R g=u,o= /var/lib/maintd /home/maintd /scratch

COPY --from=build /opt/maintd /opt/maintd
COPY config /opt/maintd/share/config
COPY policies /opt/maintd/share/policies
COPY docker/entrypoint.sh /usr/local/bin/maintd-entrypoint

# Any UID may run the image, with or without a passwd entry (the entrypoint gives it a name), and the root
# filesystem may be read-only: HOME, TMPDIR (java.io.tmpdir follows /tmp), the state and Spark's scratch
# space are directories a deployment mounts writable (the Helm chart mounts emptyDirs there).
ENV PATH=/opt/maintd/bin:$PATH \
    JAVA_HOME=/usr/lib/jvm/default-java \
    HOME=/home/maintd \
    TMPDIR=/tmp \
    SPARK_LOCAL_DIRS=/scratch \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYSPARK_PYTHON=/opt/maintd/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/maintd/bin/python \
    LOGURU_DIAGNOSE=NO \
    MAINTD_STATE_DIR=/var/lib/maintd \
    MAINTD_LOGGING__JSON=true \
    MAINTD_HTTP__HOST=0.0.0.0 \
    MAINTD_HTTP__PORT=9464

USER 10001:0
WORKDIR /var/lib/maintd
EXPOSE 9464

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MAINTD_HTTP__PORT', '9464'), timeout=4)"]

# tini forwards SIGTERM to maintd (which drains in-flight commits) and reaps the JVM's children.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/maintd-entrypoint"]
CMD ["maintd", "daemon"]
