#!/bin/bash
# Builds, tests and benchmarks the CUDA engine on a GPU machine, in one run.
# Usage (from the checkout root, after ../shared/gpu/prepare.sh packed .gpu/):
#   source .gpu/env.sh && scripts/gpu-check.sh [stage...]
# Stages (default: all, in this order):
#   ptx    regenerate internal/gpu/kernels/*.ptx with nvcc (make ptx)
#   build  make gpu (bin/ with -tags cuda), ldd of the binaries
#   test   go test -tags cuda ./internal/gpu/... (GPU conformance + CPU comparisons)
#   all    go test -tags cuda -short ./... (every package, CUDA build)
#   bench  the production-size stitch benchmark (make gpu-bench)
#   fatbin regenerate internal/gpu/kernels/*.fatbin with nvcc (make fatbin), packed into
#          $OUT/kernels-fatbin.tar (commit them; run build again to embed them)
#   open   one engine open with an empty JIT cache (CUDA_CACHE_DISABLE=1 kintsugi-gpubench
#          -stage open): the first open on a fresh node
#   suites the GPU suites of internal/gpu, stitch, deconstage, edfstage, regstage and cyclestage (-short)
#   edf    the EDF benchmark without TIFF I/O or the whole stage (per-channel time)
# Example, the PTX-only open, then the fatbins, built in and opened again:
#   source .gpu/env.sh && scripts/gpu-check.sh build open fatbin build open
# Logs go to $LOGS (default /tmp/gpu-logs); the regenerated
# PTX is also packed into $OUT/kernels-ptx.tar and, when $OUT is set, the logs
# into $OUT/gpu-logs.tar.gz (the device tool returns at most 8 files).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
LOGS=${LOGS:-/tmp/gpu-logs}
mkdir -p "$OUT" "$LOGS"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(ptx build test bench)
status=0
log() { echo "== $(date +%T) $*" | tee -a "$LOGS/summary.txt"; }
n=0
run() { # name, command...
  n=$((n + 1))
  local name=$n-$1; shift
  log "$name: $*"
  local t0=$SECONDS
  "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  log "$name: exit $rc in $((SECONDS - t0)) s"
  [ $rc -ne 0 ] && { status=1; tail -40 "$LOGS/$name.log"; }
  return $rc
}
log "host: $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
log "nvcc: $(${CUDA_HOME:-/usr/local/cuda}/bin/nvcc --version | tail -1)"
for s in "${stages[@]}"; do
  case $s in
  ptx)
    run ptx make ptx && tar -cf "$OUT/kernels-ptx.tar" internal/gpu/kernels/*.ptx ;;
  build)
    run vet env CGO_ENABLED=1 CGO_CFLAGS="-I$PWD/cuda/shim -I$CUDA_HOME/include" \
      CGO_LDFLAGS="-L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs" go vet -tags cuda ./internal/gpu/...
    run build make gpu && for b in bin/*; do echo "### ldd $b"; ldd "$b"; done > "$LOGS/ldd.txt" 2>&1
    grep -E "^###|cuda|cufft|not found|libc\.|libstdc|libm\.|libgcc|libpthread|libdl|librt" "$LOGS/ldd.txt" | head -40 ;;
  test)
    run test make gpu-test GPU_TEST_PKGS=./internal/gpu/... GPU_TEST_FLAGS="-count=1 -v -timeout 540s"
    grep -E "^(=== RUN|--- |PASS|FAIL|ok)|gpu tests on|worst|error:|bound" "$LOGS/$n-test.log" | grep -v "^=== RUN" | head -80 ;;
  all)
    run testall make gpu-test GPU_TEST_FLAGS="-count=1 -short -timeout 540s"
    grep -E "^(ok|FAIL|---)" "$LOGS/$n-testall.log" | head -60 ;;
  bench)
    run bench-small bin/kintsugi-gpubench -preset small -dir /tmp/kintsugi-bench-small
    tail -14 "$LOGS/$n-bench-small.log"
    run bench bin/kintsugi-gpubench ${BENCH_ARGS:--dir /tmp/kintsugi-bench -cpu-compare}
    tail -32 "$LOGS/$n-bench.log" ;;
  fatbin)
    run fatbin make fatbin && tar -cf "$OUT/kernels-fatbin.tar" internal/gpu/kernels/*.fatbin
    ls -l internal/gpu/kernels/*.fatbin ;;
  open)
    run open env CUDA_CACHE_DISABLE=1 bin/kintsugi-gpubench -stage open
    grep -E "engine:" "$LOGS/$n-open.log" ;;
  suites)
    run suites make gpu-test GPU_TEST_PKGS="./internal/gpu/ ./internal/stitch/ ./internal/deconstage/ ./internal/edfstage/ ./internal/regstage/ ./internal/cyclestage/" \
      GPU_TEST_FLAGS="-count=1 -short -timeout 540s"
    grep -E "^(ok|FAIL|---|panic)" "$LOGS/$n-suites.log" | head -60 ;;
  edf)
    run edf bin/kintsugi-gpubench -stage edf -edf-io=false -edf-stage=false -dir /tmp/kintsugi-bench-edf
    tail -24 "$LOGS/$n-edf.log" ;;
  *) echo "unknown stage $s"; status=2 ;;
  esac
done
log "done, status $status"
tar -czf "$OUT/gpu-logs.tar.gz" -C "$LOGS" . 2>/dev/null
exit $status
