#!/bin/sh
# Container entrypoint of the ragmt images.
#
# Waits until Redis answers when RAGMT_REDIS_URL is set (at most WAIT_FOR_REDIS_S seconds,
# default 60; past that it exits 1 and says why), then execs the command. The command is a
# full command line (`ragmt serve`, `ragmt worker`, `bash`) or a bare ragmt sub-command or
# option (`serve`, `--help`), which gets `ragmt` put in front. No command: `ragmt serve`.
set -eu

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)

if [ "$#" -eq 0 ]; then
  set -- ragmt serve
fi
case "$1" in
  -*) set -- ragmt "$@" ;;
  *) command -v -- "$1" >/dev/null 2>&1 || set -- ragmt "$@" ;;
esac

if [ -n "${RAGMT_REDIS_URL:-}" ]; then
  python "$here/wait_for_redis.py"
fi

exec "$@"
