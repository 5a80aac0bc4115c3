# maintd: the table-maintenance daemon, with a local Spark driver (OpenJDK 17).
# Build: docker build -t maintd:0.1.0 .      Run: docker run -e MAINTD_STORE__URL=... maintd:0.1.0
#
# bookworm is named explicitly: it is the Debian release that ships openjdk-17-jre-headless
# (the next one only ships Java 21), and Spark 3.5 supports Java 17.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python \
    MAINTD_STATE_DIR=/var/lib/maintd \
    MAINTD_LOGGING__JSON=true \
    MAINTD_HTTP__HOST=0.0.0.0 \
    MAINTD_HTTP__PORT=9464

# The JRE tracks Debian security updates; pinning its exact version would make every rebuild fail
# once the pinned build leaves the archive.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini \
    && rm -rf /var/lib/apt/lists/* \
    && JAVA_BIN="$(readlink -f /usr/bin/java)" \
    && ln -s "$(dirname "$(dirname "$JAVA_BIN")")" /usr/lib/jvm/default-java \
    && groupadd --system --gid 10001 maintd \
    && useradd --system --uid 10001 --gid maintd --home-dir /var/lib/maintd --create-home --shell /usr/sbin/nologin maintd

WORKDIR /opt/maintd
COPY pyproject.toml README.md ./
COPY maintd ./maintd
COPY jobs ./jobs
COPY config ./config
COPY policies ./policies
# The package is installed from this source tree, so its version is the tree's; dependencies are
# bounded in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[postgres]"

# JAVA_HOME through the architecture-independent link made above (amd64 and arm64 images alike).
ENV JAVA_HOME=/usr/lib/jvm/default-java

USER 10001:10001
WORKDIR /var/lib/maintd
EXPOSE 9464

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MAINTD_HTTP__PORT', '9464'), timeout=4)"]

# tini forwards SIGTERM to maintd (which drains in-flight commits) and reaps the JVM's children.
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["maintd", "daemon"]
