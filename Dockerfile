# coding-agent: `coding-agent serve` (polling, workers, dashboard) in a slim Python image.
# Build: docker build -t coding-agent .   Run: see docker-compose.yml.
FROM python:3.11-slim

# git for the workspaces, bubblewrap for the command sandbox, ca-certificates for HTTPS.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git bubblewrap ca-certificates \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/coding-agent
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir '.[distributed]'

# A non-root user; its home holds the config, the state, workspaces and logs.
RUN useradd --create-home --uid 10001 agent
USER agent
WORKDIR /home/agent
ENV CODING_AGENT_CONFIG=/home/agent/config.yaml

# The dashboard must listen beyond the container's localhost to be reachable:
# set `dashboard: {bind: 0.0.0.0:8080, token: ${DASHBOARD_TOKEN}}` in config.yaml.
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4).status != 200)"

CMD ["coding-agent", "serve"]
