#!/usr/bin/env bash
# Demo step: the node-health ledger (sacme nodes). The NCCL failure of step
# 50-ft named its culprit node; the diagnosis put an event in the ledger, so
# `sacme nodes` shows that node's history beside its Slurm state, and
# `reconcile --dry-run` says what the drain policy would do (the demo's
# policy is off: nothing is drained).
set -euo pipefail
run_json=$(sacme --db "$ACME_DB" status --json)
node=$(printf '%s' "$run_json" | python3 -c 'import json,sys; v=json.load(sys.stdin); print(next(n for a in v["attempts"] for n in a["excluded"]))')
echo "-- sacme nodes (the excluded node is $node)" >&2
sacme --db "$ACME_DB" nodes
echo "-- sacme nodes show $node" >&2
sacme --db "$ACME_DB" nodes show "$node"
echo "-- sacme nodes reconcile --dry-run" >&2
sacme --db "$ACME_DB" nodes reconcile --dry-run
sacme --db "$ACME_DB" nodes --json | python3 -c '
import json, sys
node = sys.argv[1]
row = next(r for r in json.load(sys.stdin)["nodes"] if r["node"] == node)
assert row["events"] >= 1, row
' "$node"
