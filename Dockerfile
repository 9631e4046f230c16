# logdx service image: `docker build -t logdx .` then
#   docker run -d -p 8000:8000 -v logdx-data:/data logdx
#   docker exec CONTAINER logdx token create --role admin --name me
# Settings are LOGDX_* environment variables (docs/SERVICE.md), e.g. -e LOGDX_DATABASE_URL=...
# BASE: any Debian-based image with python3 (>= 3.11) and its venv module; the default is the
# official one. Two stages: the wheel is built (C scan loop compiled) in the first, only the
# installed wheel reaches the second, which runs as an unprivileged user.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
RUN command -v gcc >/dev/null || { apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*; }
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md alembic.ini ./
COPY app/ app/
COPY rules/ rules/
COPY prompts/ prompts/
COPY alembic/ alembic/
COPY examples/ examples/
COPY tests/data/metric_lines.txt tests/data/normal_lines.txt tests/data/
RUN python3 -m venv /opt/build && /opt/build/bin/pip install --no-cache-dir build \
    && /opt/build/bin/python -m build --wheel --outdir /dist . \
    # the C scan loop is optional for pip (no compiler: a slower pure-Python loop); not for the image
    && /opt/build/bin/python -c "import glob, sys, zipfile; names = zipfile.ZipFile(glob.glob('/dist/*.whl')[0]).namelist(); \
sys.exit(0 if any(n.startswith('app/core/_shapescan') and n.endswith('.so') for n in names) else 'C scan loop not built')"

FROM ${BASE} AS runtime
COPY --from=build /dist/ /tmp/dist/
RUN python3 -m venv /opt/logdx && /opt/logdx/bin/pip install --no-cache-dir /tmp/dist/*.whl && rm -rf /tmp/dist \
    && useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin logdx \
    && mkdir -p /data && chown logdx:logdx /data && chmod 700 /data
COPY deploy/entrypoint.sh /usr/local/bin/logdx-entrypoint
ENV PATH=/opt/logdx/bin:$PATH \
    HOME=/data \
    PYTHONUNBUFFERED=1 \
    LOGDX_DATA_DIR=/data \
    LOGDX_HOST=0.0.0.0 \
    LOGDX_PORT=8000
USER 10001:10001
WORKDIR /data
VOLUME /data
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python3", "-c", "import os, sys, urllib.request; r = urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('LOGDX_PORT', '8000'), timeout=4); sys.exit(r.status != 200)"]
ENTRYPOINT ["logdx-entrypoint"]
