# Lethe service image: the API (`python -m service`) and the Celery worker share it.
#
# CPU (default):   docker build -t lethe .
# CUDA:            docker build -t lethe:cuda \
#                    --build-arg BASE_IMAGE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime .
# A base image that already has torch (the pytorch/pytorch CUDA images) keeps its CUDA build; otherwise
# torch is installed from TORCH_INDEX (the CPU wheels by default).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LETHE_HOST=0.0.0.0 \
    LETHE_VAR_DIR=/data

WORKDIR /app
RUN python -c "import torch" 2>/dev/null || pip install torch --index-url "${TORCH_INDEX}"

# Dependencies first (cached while only the code changes), then the code, installed in place so that
# alembic.ini and migrations/ sit next to the packages that read them. bench/ is not shipped (nor in the
# wheel): the benchmarks run from a checkout.
COPY pyproject.toml README.md ./
RUN mkdir -p unlearning service workers lethe_cli && touch unlearning/__init__.py service/__init__.py \
        workers/__init__.py lethe_cli/__init__.py \
    && pip install -e '.[s3]' && rm -rf unlearning service workers lethe_cli
COPY alembic.ini openapi.yaml ./
COPY migrations ./migrations
COPY unlearning ./unlearning
COPY service ./service
COPY workers ./workers
COPY lethe_cli ./lethe_cli

RUN useradd --create-home --uid 10001 lethe && mkdir -p /data && chown lethe /data
USER lethe
VOLUME ["/data"]
EXPOSE 8000 9100
CMD ["python", "-m", "service"]
