# Build and test targets. `make` builds every executable into bin/ as a static
# binary (CGO_ENABLED=0): copied onto a cluster node it runs with nothing else
# installed. The CUDA build (`make gpu`) lives in mk/cuda.mk.
GO        ?= go
BIN       ?= bin
CMDS      := wrappers/stitch wrappers/decon wrappers/edf wrappers/cycle wrappers/register \
             cmd/kintsugi-assign cmd/kintsugi-synth cmd/kintsugi-accuracy cmd/kintsugi-qc \
             cmd/kintsugi-config
LDFLAGS   := -s -w
export CGO_ENABLED ?= 0

.PHONY: all build test check unit e2e vet example clean fuzz

all: build

build:
	@mkdir -p $(BIN)
	@for d in $(CMDS); do \
	  name=$$(basename $$d); case $$d in wrappers/*) name=kintsugi-$$name;; esac; \
	  [ -d $$d ] || continue; \
	  echo "go build -o $(BIN)/$$name ./$$d"; \
	  $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$$name ./$$d || exit 1; \
	done

vet:
	$(GO) vet ./...

unit:
	$(GO) test -count=1 ./...

# The README's test command: unit tests, then the end-to-end test on the real
# local SLURM cluster (scripts/slurm-up.sh must have started it).
test: build vet unit e2e

# The README's test command on a fresh Debian machine (root or sudo): installs the
# test packages, starts the local SLURM cluster, runs everything.
check:
	scripts/test-deps.sh
	scripts/slurm-up.sh
	$(MAKE) test

# The README's example: the whole pipeline (stitch -> deconvolve -> edf -> registration) through
# Snakemake, locally, on the built-in synthetic example project, on the explicitly requested CPU
# device (scripts/example.sh).
example:
	scripts/example.sh

# The kill/rerun test runs with fewer interrupted jobs in CI (6, every kill method on stitch
# and decon); `tests/e2e/kill_rerun.sh` alone runs the full 20 over every stage.
E2E_KILL_RERUN_N ?= 6
E2E_KILL_RERUN_STAGES ?= stitch decon
# The Snakemake versions of the end-to-end test: Debian's 7.21 and 9.25.2 from the offline wheelhouse
# (scripts/test-deps.sh installs it into $(SM9_VENV)). On a test cluster shared by several users,
# run the whole target under one lock (`flock /tmp/kintsugi-slurm.lock make e2e`), so that their
# job accounting never mixes; the target takes no lock itself (a nested flock would wait on itself).
SM7       ?= /usr/bin/snakemake
SM9_VENV  ?= /opt/kintsugi-sm/9.25.2
SM9       ?= $(SM9_VENV)/bin/snakemake
E2E_DIR   ?= /tmp/kintsugi-e2e

e2e: build
	tests/e2e/sm_compat.sh
	SNAKEMAKE=$(SM7) tests/e2e/local_quoting.sh
	SNAKEMAKE=$(SM9) tests/e2e/local_quoting.sh
	KINTSUGI_E2E_DIR=$(E2E_DIR)-7 E2E_SNAKEMAKE=$(SM7) tests/e2e/run.sh
	KINTSUGI_E2E_DIR=$(E2E_DIR)-9 E2E_SNAKEMAKE=$(SM9) E2E_CONFIG_FROM=init tests/e2e/run.sh
	KINTSUGI_FUSED_DIR=$(E2E_DIR)-fused E2E_SNAKEMAKE=$(SM9) tests/e2e/fused.sh
	KILL_RERUN_N=$(E2E_KILL_RERUN_N) KILL_RERUN_STAGES="$(E2E_KILL_RERUN_STAGES)" tests/e2e/kill_rerun.sh
	tests/e2e/stale_coordinator.sh

clean:
	rm -rf $(BIN)

# Fuzz the readers of untrusted files (outside CI): FUZZTIME (default 10m) each
# of go test -fuzz on the TIFF reader's FuzzDecode (seeded with
# internal/tiffio/testdata/fuzz/FuzzDecode: ImageJ big-/little-endian files
# among them) and the config loader's FuzzLoad (seeded with the example config
# and small hostile YAML). A crash is written to the package's
# testdata/fuzz/<target>/ as a new corpus file: fix the reader and commit it.
FUZZTIME ?= 10m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./internal/tiffio
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./internal/config

-include mk/cuda.mk
