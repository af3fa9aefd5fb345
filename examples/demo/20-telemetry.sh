#!/usr/bin/env bash
# Demo step: telemetry. The prolog/epilog (prolog/acme-prolog, epilog/acme-epilog)
# mark each job's start, GPUs and end; one collector per node samples every GPU
# and the node every few seconds into a node-local spool. The emulated GPUs are
# empty files, so the cluster's acme.toml turns on the clearly labelled
# SYNTHETIC GPU sampler (source=synthetic in every row).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
conf="$(dirname "$SLURM_CONF")/acme.toml"
spool=$(python3 -c "import sys,tomllib; print(tomllib.load(open(sys.argv[1],'rb'))['telemetry']['spool_dir'])" "$conf")

echo "-- node collectors (started as the systemd unit or the first prolog would)" >&2
for node in $(sinfo -h -N -o %N | sort -u); do
    mkdir -p "$spool/$node"
    ACME_CONF="$conf" setsid "$here/sbin/acme-collectd" --node "$node" \
        --log-file "$spool/$node/collectd.log" </dev/null >/dev/null 2>&1 &
done
sleep 5

echo "-- a 2-node job holding 3 GPUs per node for 15 s" >&2
job=$(sbatch --parsable -N2 --gpus-per-node=3 -J demo-telemetry -t 5 -o /dev/null --wrap 'sleep 15')
echo "job $job" >&2
while squeue -h -j "$job" 2>/dev/null | grep -q .; do sleep 2; done

echo "-- node spools -> the demo store (sacme collectd flush --all)" >&2
for _ in $(seq 1 30); do
    sacme --config "$conf" --db "$ACME_DB" collectd flush --all >/dev/null
    if sacme --db "$ACME_DB" collectd summaries --json "$job" \
        | python3 -c "import json,sys; r=json.load(sys.stdin); sys.exit(0 if r and 'nodes_still_running' not in (r[0]['flags'] or '') else 1)"; then
        break
    fi
    sleep 2
done
sacme --config "$conf" --db "$ACME_DB" collectd job "$job"
sacme --db "$ACME_DB" collectd summaries "$job"
