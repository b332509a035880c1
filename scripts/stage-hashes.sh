#!/usr/bin/env bash
# golden.sh BIN OUTDIR : runs synth(tiny,2 cycles,2 channels) -> stitch -> decon -> edf -> register -> qc
# with the executables in BIN (CPU device) and writes OUTDIR/hashes.txt (sha256 of every output file;
# DECONV_parameters.txt / sentinels / logs masked of times). Compare two runs with
#   diff A/hashes.txt B/hashes.txt
# FUSED=1 runs each cycle through kintsugi-cycle instead of the three stage executables (same hashes).
set -euo pipefail
bin=$(cd "$1" && pwd); out=$2
rm -rf "$out"; mkdir -p "$out"; p=$out/project
export cpus_per_task=${cpus_per_task:-2}
"$bin/kintsugi-synth" --preset tiny --ncycles 2 --nchannels 2 --zplanes 3 --out "$p" --device cpu --log-format text >"$out/log.txt" 2>&1
cfg=$p/config.yaml
for c in 1 2; do
  if [ -n "${FUSED:-}" ]; then # the fused cycle instead of the three stages: the same hashes
    "$bin/kintsugi-cycle" run --config "$cfg" --cycle $c --device "${DEVICE:-cpu}" --log-format text >>"$out/log.txt" 2>&1
  else
    for t in stitch decon edf; do "$bin/kintsugi-$t" run --config "$cfg" --cycle $c --device "${DEVICE:-cpu}" --log-format text >>"$out/log.txt" 2>&1; done
  fi
done
"$bin/kintsugi-register" run --config "$cfg" --device "${DEVICE:-cpu}" --log-format text >>"$out/log.txt" 2>&1
for s in stitch decon edf registration; do "$bin/kintsugi-qc" run --stage $s --config "$cfg" --log-format text >>"$out/log.txt" 2>&1; done
cd "$p"
find data/processed qc_plots -type f ! -name '*.log' | sort | while read -r f; do
  case "$f" in
    *DECONV_parameters.txt|*.snakemake_complete*|*.json|*.html|*.txt)
      printf '%s  %s\n' "$(sed -E "s#$p##g; s/[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+Z?//g; s/[0-9]+:[0-9]{2}:[0-9]{2}(\.[0-9]+)?//g; s/(duration|elapsed|seconds|wall|time|host|pid|rss|peak)[a-z_]*[=:\" ]+[^,} ]*//g" "$f" | sha256sum | cut -c1-16)" "$f (masked)";;
    *) printf '%s  %s\n' "$(sha256sum < "$f" | cut -c1-16)" "$f";;
  esac
done > "$out/hashes.txt"
wc -l < "$out/hashes.txt"
