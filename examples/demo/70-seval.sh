#!/usr/bin/env bash
# Demo step: `seval`, decoupled evaluation scheduling (the paper's Trial Coordinator).
# 1. The paper's setting, simulated: 7B model, 63 datasets, 1 and 4 nodes.
# 2. A tiny GPT checkpoint evaluated for real on the local cluster (2 nodes x 2
#    GPU slots): the plan (--dry-run), then preload per node, GPU trial arrays,
#    CPU scoring arrays (aftercorr), aggregation into the store, cleanup.
set -euo pipefail
dir="$ACME_DEMO_DIR/seval"
mkdir -p "$dir"

echo "-- seval simulate (baseline vs trial coordinator)" >&2
seval simulate --nodes 1,4

python3 - "$dir/ckpt" <<'PY'
import string, sys
from slurm_acme.models.tiny_gpt import CharTokenizer, TinyGPT, TinyGPTConfig, save_pretrained
tok = CharTokenizer(sorted(set(string.printable)))
save_pretrained(TinyGPT(TinyGPTConfig(vocab_size=tok.vocab_size)), tok, sys.argv[1])
PY
cat > "$dir/acme.toml" <<TOML
[evaluate]
work_dir = "$dir/work"
local_dir = "/dev/shm/acme-demo-eval"
gpus_per_node = 2
trial_overhead_s = 3.0
time_limit = "00:10:00"
TOML

echo "-- seval CKPT --datasets tiny --dry-run" >&2
seval --config "$dir/acme.toml" "$dir/ckpt" --datasets tiny --nodes 2 --dry-run | sed -n '1,12p'

echo "-- seval CKPT --datasets tiny (submitting)" >&2
eval_id=$(seval --config "$dir/acme.toml" "$dir/ckpt" --datasets tiny --nodes 2)
for _ in $(seq 1 150); do
    state=$(seval status --json | python3 -c "import json,sys; print(next(r['state'] for r in json.load(sys.stdin) if r['eval_id']=='$eval_id'))")
    case "$state" in COMPLETED|PARTIAL) break ;; esac
    sleep 2
done
seval status "$eval_id"
seval results "$dir/ckpt"
