#!/usr/bin/env bash
# Demo step: `sacme report`, the paper's characterisation of a cluster.
# 1. What the demo cluster itself ran (jobs ingested by the earlier steps,
#    their telemetry and the failure the fault-tolerant run recovered from).
# 2. A six-month AcmeTrace-format trace, imported and reported month by month
#    beside Seren, Kalos, Philly, Helios and PAI, as a self-contained HTML page
#    and as text: the last thing `make demo` prints, findings first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir="$ACME_DEMO_DIR/report"
mkdir -p "$dir"

echo "-- sacme ingest (finished jobs from sacct) + sacme report (this cluster, all time)" >&2
sacme ingest --since 1d >&2
sacme report --format text

"$here/../trace_report.sh" "$dir"
