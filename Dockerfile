# One image for every service of docker-compose.yml. It is built with the same
# setup script as the README's run command, and each service runs one
# component through scripts/serve.sh, exactly as scripts/up.sh does.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOST=0.0.0.0 \
    PORT=8000

WORKDIR /app
COPY . .
RUN scripts/setup.sh

EXPOSE 8000
CMD ["scripts/serve.sh", "web"]
