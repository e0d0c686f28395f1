# The SparkPanel image: web, Celery worker and beat all run from it (see docker-compose.yml).
# Built for the Spark's own architecture (arm64) or any other: nothing here is GPU-specific,
# the vLLM container is started by the worker through the Docker socket.
#
# BASE: any Debian bookworm with Python 3.11 and its venv module. The default is the official
# Python image; where no registry can be pulled, tools/base_image.sh builds one from Debian's
# own packages (`docker build --build-arg BASE=...`, as the project's tests do: docs/deploy.md).
ARG BASE=python:3.11.11-slim-bookworm
FROM ${BASE}

# The panel's Python environment is a virtual environment: Debian's own Python refuses
# system-wide pip installs, and the official image's is kept as it came.
ENV PATH=/opt/sparkpanel/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SPARKPANEL_VAR_DIR=/var/lib/sparkpanel

WORKDIR /app
COPY pyproject.toml README.md ./
COPY sparkpanel ./sparkpanel
COPY apps ./apps
COPY sparkcli ./sparkcli
COPY sparkdomain ./sparkdomain
COPY sparksim ./sparksim
COPY vllm_adapter ./vllm_adapter
COPY hf_adapter ./hf_adapter
COPY hubsim ./hubsim
COPY ray_adapter ./ray_adapter
COPY git_adapter ./git_adapter
RUN python3 -m venv /opt/sparkpanel && pip install '.[postgres]'
COPY . .
RUN useradd --system --home-dir /var/lib/sparkpanel --create-home sparkpanel \
    && SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput \
    && chown -R sparkpanel:sparkpanel /var/lib/sparkpanel

USER sparkpanel
EXPOSE 8000
ENTRYPOINT ["/app/tools/container-start.sh"]
CMD ["web"]
