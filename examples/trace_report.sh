#!/usr/bin/env bash
# The demo's AcmeTrace part of `sacme report` (examples/demo/90-report.sh runs
# it; tests/integration/test_report_html.py opens what it writes):
#   trace_report.sh DIR
# writes a six-month AcmeTrace-format trace (March-August 2023, 30,000 jobs),
# imports it with `sacme import-trace`, writes the six-month report as one
# self-contained HTML page (DIR/report.html, plots in DIR/plots) and prints the
# same report as text: findings first, beside Acme; month by month; then every
# section with Seren, Kalos, Philly, Helios and PAI beside it (--compare).
set -euo pipefail
dir="$1"
mkdir -p "$dir"
trace_db="sqlite:///$dir/trace.db"
rm -f "$dir/trace.db"
python3 - "$dir/trace_synthetic.csv" <<'PY'
import sys
from datetime import datetime, timezone
from slurm_acme.report.synthetic import synthetic_jobs, write_trace_csv
start = datetime(2023, 3, 1, tzinfo=timezone.utc).timestamp()
span = datetime(2023, 9, 1, tzinfo=timezone.utc).timestamp() - start
write_trace_csv(sys.argv[1], synthetic_jobs(30000, seed=1, start_ts=start, span_s=span, cluster="synthetic"))
PY
echo "-- sacme import-trace ($dir/trace_synthetic.csv)" >&2
sacme --db "$trace_db" import-trace "$dir/trace_synthetic.csv" --cluster synthetic >&2
range=(--since 2023-03-01 --until 2023-09-01 --cluster synthetic --compare)
echo "-- sacme report ${range[*]} --format html" >&2
sacme --db "$trace_db" report "${range[@]}" --format html --out "$dir/report.html" --plots "$dir/plots"
echo "-- sacme report ${range[*]}" >&2
sacme --db "$trace_db" report "${range[@]}"
echo "HTML report: $dir/report.html (plots in $dir/plots)" >&2
