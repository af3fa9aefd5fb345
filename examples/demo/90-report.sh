#!/usr/bin/env bash
# Demo step: `sacme report`, the paper's characterisation of a cluster.
# 1. What the demo cluster itself ran (jobs ingested by the earlier steps).
# 2. A 20,000-job AcmeTrace-format trace, imported and reported for its
#    busiest month beside Seren, Kalos, Philly, Helios and PAI, as text and
#    as a self-contained HTML page with one plot per figure.
set -euo pipefail
dir="$ACME_DEMO_DIR/report"
mkdir -p "$dir"

echo "-- sacme ingest (finished jobs from sacct) + sacme report (this cluster, all time)" >&2
sacme ingest --since 1d >&2
sacme report --format text

trace_db="sqlite:///$dir/trace.db"
rm -f "$dir/trace.db"
month=$(python3 - "$dir/trace_synthetic.csv" <<'PY'
import csv, sys
from collections import Counter
from datetime import datetime, timezone
from slurm_acme.report.synthetic import TRACE_COLUMNS, acme_csv_row, synthetic_jobs
months = Counter()
with open(sys.argv[1], "w", newline="") as fh:
    out = csv.writer(fh)
    out.writerow(TRACE_COLUMNS)
    start = datetime(2023, 5, 1, tzinfo=timezone.utc).timestamp()
    for job in synthetic_jobs(20000, seed=1, start_ts=start, span_s=92 * 86400, cluster="synthetic"):
        months[datetime.fromtimestamp(job["submit_ts"], timezone.utc).strftime("%Y-%m")] += 1
        out.writerow(acme_csv_row(job))
print(months.most_common(1)[0][0])
PY
)
echo "-- sacme import-trace + sacme report --month $month --compare" >&2
sacme --db "$trace_db" import-trace "$dir/trace_synthetic.csv" --cluster synthetic >&2
sacme --db "$trace_db" report --month "$month" --cluster synthetic --format html \
    --out "$dir/report.html" --plots "$dir/plots" --compare
sacme --db "$trace_db" report --month "$month" --cluster synthetic --compare
echo "HTML report: $dir/report.html (plots in $dir/plots)" >&2
