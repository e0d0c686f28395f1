#!/bin/sh
# Entry point of the SparkPanel image: `web`, `worker`, `worker-default`, `hostagent` or `beat`;
# anything else is run as given.
set -eu
case "${1:-web}" in
  web)
    python manage.py migrate --noinput
    # X-Forwarded-For/-Proto are believed only from the proxies FORWARDED_ALLOW_IPS lists;
    # unset, from nobody (uvicorn's own default trusts 127.0.0.1). The same rule as
    # tools/devrun.py::proxy_flags.
    trusted=$(printf '%s' "${FORWARDED_ALLOW_IPS:-}" | tr -d ' \t')
    if [ -n "$trusted" ]; then
      set -- --proxy-headers --forwarded-allow-ips "$trusted"
    else
      set -- --no-proxy-headers
    fi
    # Bounded connections (the same flags as tools/devrun.py): a request head complete
    # within HTTP_HEADER_TIMEOUT s and at most 16 KiB, idle keep-alive connections closed
    # after 5 s, at most 512 connections, WebSocket messages up to 1 MiB.
    # PORT: 8000 unless the container shares a network that has it taken (host networking).
    exec uvicorn sparkpanel.asgi:application --host 0.0.0.0 --port "${PORT:-8000}" "$@" \
      --http sparkpanel.httpserver:HttpToolsBoundedProtocol \
      --h11-max-incomplete-event-size 16384 \
      --timeout-keep-alive 5 \
      --limit-concurrency 512 \
      --ws-max-size 1048576
    ;;
  worker)
    # One worker per Spark: only this host's queue, one task at a time.
    : "${SPARK_NAME:?set SPARK_NAME to this Spark's host name in the panel}"
    exec celery -A sparkpanel worker -Q "host.${SPARK_NAME}" -n "${SPARK_NAME}@%h" \
      -c 1 --prefetch-multiplier 1 -l INFO
    ;;
  worker-default)
    exec celery -A sparkpanel worker -Q default -n "default@%h" -c 2 --prefetch-multiplier 1 -l INFO
    ;;
  hostagent)
    # The Spark's telemetry agent and memory watchdog (independent of the Celery queue).
    : "${SPARK_NAME:?set SPARK_NAME to this Spark's host name in the panel}"
    exec python manage.py hostagent --host "${SPARK_NAME}"
    ;;
  beat)
    exec celery -A sparkpanel beat -l INFO -s "${SPARKPANEL_VAR_DIR}/celerybeat-schedule"
    ;;
  *)
    exec "$@"
    ;;
esac
