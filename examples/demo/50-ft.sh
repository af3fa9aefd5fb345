#!/usr/bin/env bash
# Demo step: fault-tolerant pretraining (sacme submit). The tiny GPT trains on
# 2 nodes; at step 12 the rank on the second node dies with an NCCL error. The
# in-job supervisor diagnoses it as infrastructure, excludes that node, requeues
# the job (no 2-minute requeue delay), and the next attempt resumes from the
# asynchronous checkpoint on other nodes and completes. `sacme status` shows it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work="$ACME_DEMO_DIR/ft"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
cat > train.yaml <<YAML
name: demo-ft-pretrain
nodes: 2
gpus_per_node: 8
time: "00:10:00"
command: [python3, $repo/examples/train_tiny_gpt.py, --steps, "30", --ckpt-interval, "5",
          --n-layer, "1", --n-head, "2", --n-embd, "32", --batch-size, "4", --seq-len, "32"]
env:
  ACME_FAULTS: "raise:step=12,rank=1,attempt=0,message=NCCL error: unhandled system error"
checkpoint: {dir: ckpt, interval: 5, keep: 3, async: true}
fault_tolerance: {max_restarts: 2, health_check: none, hang_timeout: 120}
YAML

echo "-- sacme submit --dry-run (the plan: sbatch argv and script, nothing submitted)" >&2
sacme --db "$ACME_DB" submit train.yaml --dry-run | sed -n '3p' >&2
echo "-- sacme submit" >&2
run=$(sacme --db "$ACME_DB" submit train.yaml --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
echo "run $run" >&2
for _ in $(seq 1 120); do
    state=$(sacme --db "$ACME_DB" status "$run" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    case "$state" in COMPLETED|STOPPED) break ;; esac
    sleep 2
done
echo "-- sacme status $run" >&2
sacme --db "$ACME_DB" status "$run"
echo "-- sacme logs $run (compressed), first attempt" >&2
sacme --db "$ACME_DB" logs "$run" | sed -n '/== attempt 0/,/== attempt 1/p' | grep -E "NCCL|Traceback|attempt|Error" | head -8
[ "$state" = COMPLETED ]
