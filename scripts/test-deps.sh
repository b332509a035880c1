#!/usr/bin/env bash
# Installs, if missing, the Debian packages the tests use (--no-install-recommends): the SLURM
# daemons (munge, slurm-wlm, slurmdbd with MariaDB), Snakemake 7.21, tifffile (the independent
# TIFF reader of the tests), libtiff6 (the TIFF cross-check writes LZW/PackBits files through it),
# make, git and ca-certificates (Go's module download). Run as root,
# or as a user with sudo.
set -euo pipefail
pkgs="make git ca-certificates munge slurm-wlm slurmdbd mariadb-server snakemake python3-tifffile python3-jsonschema libtiff6 bc chromium"
# shellcheck disable=SC2086
dpkg -s $pkgs >/dev/null 2>&1 && exit 0
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
echo "test-deps: apt-get install $pkgs"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 update -qq
# shellcheck disable=SC2086
$sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends $pkgs >/dev/null
