# etj worker image: `faust -A app.main worker -l info`, state (RocksDB) under /var/lib/etj.
#
# Two stages: the build stage makes a virtualenv with the worker's dependencies (no batch extra:
# PySpark is ~0.5 GB and the worker never imports it); the runtime stage copies only that venv
# onto a slim Python, runs as an unprivileged user and keeps nothing writable but the datadir.
#   build:  docker build -t etj:0.1.0 .
#   run:    docker run --rm -p 6066:6066 -e ETJ_BROKER_URL=kafka://kafka:9092 etj:0.1.0

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
# a regular (not editable) install: the runtime stage needs the venv only, not /src; importing
# the app (outside /src) fails the build if a dependency is missing from pyproject.toml
RUN pip install --no-cache-dir .
WORKDIR /
RUN python -c "import app.main"

FROM ${PYTHON_IMAGE} AS runtime
ARG UID=10001
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ETJ_DATADIR=/var/lib/etj \
    ETJ_STORE_URL=rocksdb:// \
    ETJ_WEB_PORT=6066
# two malloc arenas, not glibc's up to 8 per core: RocksDB's, the fetch thread's and the
# executors' threads can each get one, and memory freed in one is not reused by another
# (docs/operating/scaling.md#memory)
ENV MALLOC_ARENA_MAX=2
# a fixed uid above the system range (what the chart's runAsUser says), so not --system:
# useradd warns of a system uid above SYS_UID_MAX; --no-log-init keeps lastlog out of the layer
RUN groupadd --gid ${UID} etj \
    && useradd --no-log-init --uid ${UID} --gid etj --home-dir /var/lib/etj --no-create-home \
       --shell /usr/sbin/nologin etj \
    && mkdir -p /var/lib/etj \
    && chown etj:etj /var/lib/etj
COPY --from=build /opt/venv /opt/venv
USER ${UID}:${UID}
WORKDIR /var/lib/etj
VOLUME ["/var/lib/etj"]
EXPOSE 6066
# the chart's probes, for `docker run`: the liveness probe's period, timeout and failures, the
# startup probe's budget (5 s x 60) as the start period (tests/image checks they agree)
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=4 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health/' % os.environ.get('ETJ_WEB_PORT', '6066'), timeout=4)"]
# other tools of the app run with the same image: `docker run etj sample-traffic`
ENTRYPOINT ["faust", "-A", "app.main"]
CMD ["worker", "-l", "info"]
