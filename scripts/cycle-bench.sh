#!/usr/bin/env bash
# cycle-bench.sh DIR [PROCESSED]: the fused cycle against the three-job chain on one GPU, as SLURM runs
# them with the schema's defaults (4 cpus pinned with taskset, cpus_per_task=4, SLURM_MEM_PER_NODE =
# mem_stitch 8000 / mem_decon 6144 / mem_edf 4096 / mem_cycle 12288), TIFF I/O included, page cache warm.
# Generates the production cycle (63 tiles of 1440 x 1920, 20 z, 4 channels) with kintsugi-gpubench
# into DIR (unless DIR/config.yaml exists); PROCESSED, when given, is where data/processed lives (a
# symlink: e.g. /dev/shm on a machine whose disk cannot hold raw + stitched + deconvolved, 58 GB).
# Prints one line per run (wall s, peak host MiB from the executables' "peak host memory" log line)
# and checks that the fused outputs are byte-identical to the chain's (every plane and EDF file;
# sentinels and DECONV_parameters.txt excluded: they carry times).
# RUNS (default "chain fused nokeep") picks the runs; PROFILE=DIR writes each fused run's Go CPU
# profile and execution trace there (DIR/NAME.pprof, DIR/NAME.trace; the comparisons need all runs).
set -euo pipefail
d=$1; proc=${2:-}; bin=$(cd "$(dirname "$0")/../bin" && pwd)
[ -f "$d/config.yaml" ] || "$bin/kintsugi-gpubench" -stage stitch -dir "$d" -keep -workers 4 > "$d.gen.log" 2>&1
cfg=$d/config.yaml
nofuse=$d/config-nokeep.yaml
grep -v '^keep_intermediates:' "$cfg" > "$nofuse"; echo 'keep_intermediates: false' >> "$nofuse"
cpus=0-3
reset() {
  rm -rf "$d/data/processed" "${proc:+$proc/kintsugi-processed}"
  if [ -n "$proc" ]; then mkdir -p "$proc/kintsugi-processed"; ln -s "$proc/kintsugi-processed" "$d/data/processed"; fi
}
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }
job() { # name mem_mb exe args...: one job, its wall time and peak memory
  local name=$1 mem=$2; shift 2
  local prof=()
  [ -n "${PROFILE:-}" ] && [[ $name == fused* ]] && prof=(KINTSUGI_CPUPROFILE="$PROFILE/$name.pprof" KINTSUGI_TRACE="$PROFILE/$name.trace")
  local t0; t0=$(date +%s%N)
  env "${prof[@]}" cpus_per_task=4 SLURM_CPUS_PER_TASK=4 SLURM_MEM_PER_NODE=$mem taskset -c $cpus "$@" --log-format text > "$d/$name.log" 2>&1 || { tail -20 "$d/$name.log"; exit 1; }
  local t1; t1=$(date +%s%N)
  local peak; peak=$(grep -o 'vmhwm_mib=[0-9]*' "$d/$name.log" | tail -1 | cut -d= -f2)
  printf '%-28s %7.1f s  peak %6s MiB  (mem_mb %s)\n' "$name" "$(secs "$t0" "$t1")" "$peak" "$mem"
}
qcsums() { # the QC of stitch and decon (all cpus, not timed), time stamps masked: one hash per file
  local st; for st in stitch decon; do "$bin/kintsugi-qc" run --stage $st --config "$cfg" > "$d/qc-$st.log" 2>&1 || { tail -5 "$d/qc-$st.log"; exit 1; }; done
  (cd "$d/qc_plots" && find stitch decon -type f | sort | while read -r f; do
    printf '%s %s\n' "$(sed -E 's/[0-9]{4}-[0-9][0-9]-[0-9][0-9]T[0-9:.]+(Z|[+-][0-9][0-9]:[0-9][0-9])?//g; s/"[a-z_]*(seconds|elapsed)[a-z_]*": ?[0-9.e+-]+//g' "$f" | sha256sum | cut -c1-16)" "$f"; done) > "$1"
  rm -rf "$d/qc_plots"
}
hashes() { (cd "$d/data/processed/" && find -L . -type f -name '*.tif' | sort | xargs -P 8 -n 16 sha256sum | sort -k2) > "$1"; }
runs=" ${RUNS:-chain fused nokeep} "
all=0; [[ $runs == *" chain "* && $runs == *" fused "* && $runs == *" nokeep "* ]] && all=1
if [[ $runs == *" chain "* ]]; then
reset
t0=$(date +%s%N)
job chain-stitch 8000 "$bin/kintsugi-stitch" run --config "$cfg" --cycle 1
job chain-decon 6144 "$bin/kintsugi-decon" run --config "$cfg" --cycle 1
job chain-edf 4096 "$bin/kintsugi-edf" run --config "$cfg" --cycle 1
printf '%-28s %7.1f s\n' "chain (three jobs)" "$(secs "$t0" "$(date +%s%N)")"
hashes "$d/chain.sha"
qcsums "$d/chain-qc.sha"
fi
if [[ $runs == *" fused "* ]]; then
reset
job fused 12288 "$bin/kintsugi-cycle" run --config "$cfg" --cycle 1
[ $all = 1 ] && { hashes "$d/fused.sha"
if cmp -s "$d/chain.sha" "$d/fused.sha"; then echo "fused = chain: $(wc -l < "$d/chain.sha") TIFF files byte-identical"; else echo "fused DIFFERS from chain:"; diff "$d/chain.sha" "$d/fused.sha" | head; fi; }
fi
if [[ $runs == *" nokeep "* ]]; then
reset
job fused-no-intermediates 12288 "$bin/kintsugi-cycle" run --config "$nofuse" --cycle 1
fi
[ $all = 1 ] || { grep -h "device memory" "$d"/fused*.log || true; exit 0; }
hashes "$d/nokeep.sha"
grep '/edf/' "$d/chain.sha" > "$d/chain-edf.sha"; grep '/edf/' "$d/nokeep.sha" > "$d/nokeep-edf.sha"
if cmp -s "$d/chain-edf.sha" "$d/nokeep-edf.sha"; then echo "no intermediates: EDF planes = chain's ($(wc -l < "$d/chain-edf.sha") files), $(wc -l < "$d/nokeep.sha") TIFF files written"; else echo "no intermediates: EDF DIFFERS"; fi
qcsums "$d/nokeep-qc.sha"
if cmp -s "$d/chain-qc.sha" "$d/nokeep-qc.sha"; then echo "no intermediates: QC of stitch and decon = the chain's ($(wc -l < "$d/chain-qc.sha") files: metrics, heatmaps, overviews)"; else echo "no intermediates: QC DIFFERS"; diff "$d/chain-qc.sha" "$d/nokeep-qc.sha" | head; fi
grep -h "device memory" "$d/fused.log" "$d/fused-no-intermediates.log" || true
