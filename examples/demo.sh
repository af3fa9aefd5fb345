#!/usr/bin/env bash
# `make demo`: start the built-in local Slurm cluster (4 nodes x 8 emulated
# GPUs, accounting on), use a SQLite store, and run each demo step in
# examples/demo/ in order. Each step is a small script owned by one feature.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
export ACME_DEMO_DIR="${ACME_DEMO_DIR:-/tmp/acme-demo}"
export ACME_DB="${ACME_DB:-sqlite:///$ACME_DEMO_DIR/acme.db}"
mkdir -p "$ACME_DEMO_DIR"

"$repo/sbin/acme-cluster" up
eval "$("$repo/sbin/acme-cluster" env)"
echo "== cluster" >&2
sinfo -N -o "%N %t %G" >&2

for step in "$here"/demo/*.sh; do
    [ -e "$step" ] || continue
    echo "== $(basename "$step" .sh)" >&2
    bash "$step"
done
