#!/usr/bin/env bash
# Installs, if missing, what the tests use. Run as root, or as a user with sudo.
#   1. Debian packages (--no-install-recommends): the SLURM daemons (munge, slurm-wlm, slurmdbd with
#      MariaDB), Snakemake 7.21, tifffile (the independent TIFF reader of the tests), libtiff6 (the
#      TIFF cross-check writes LZW/PackBits files through it), make, git and ca-certificates (Go's
#      module download), chromium (the QC report test renders report.html headless); and the Debian side of Snakemake 9 (third_party/snakemake-wheels/INSTALL.md).
#   2. Snakemake 9 venvs from the offline wheelhouse third_party/snakemake-wheels/whl (no network):
#      $KINTSUGI_SM_VENVS/<version> (default /opt/kintsugi-sm) for each of $KINTSUGI_SM_VERSIONS
#      (default "9.25.2 9.16.3 9.16.2": the e2e runs on 9.25.2, tests/e2e/sm_compat.sh parses the
#      workflow under all three; ~10 s each), each with snakemake-executor-plugin-slurm 2.7.1 and jsonschema
#      4.26.0, on Debian's /usr/bin/python3 with its site packages.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs="make git ca-certificates munge slurm-wlm slurmdbd mariadb-server snakemake python3-tifffile python3-jsonschema libtiff6 bc chromium gcc libc6-dev"
# Snakemake 9.x from the wheelhouse: these come from Debian (third_party/snakemake-wheels/INSTALL.md).
pkgs9="python3-venv python3-yaml python3-docutils python3-psutil python3-requests python3-git python3-pulp
  python3-tabulate python3-connection-pool python3-throttler python3-humanfriendly python3-appdirs python3-jinja2
  python3-attr python3-plac python3-typing-extensions python3-pandas python3-numpy python3-traitlets
  python3-jupyter-core python3-fastjsonschema python3-platformdirs python3-greenlet"
VENVS=${KINTSUGI_SM_VENVS:-/opt/kintsugi-sm}
VERSIONS=${SM_VERSIONS:-${KINTSUGI_SM_VERSIONS:-9.25.2 9.16.3 9.16.2}}
WHEELS=third_party/snakemake-wheels/whl
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo

# shellcheck disable=SC2086
if ! dpkg -s $pkgs $pkgs9 >/dev/null 2>&1; then
  echo "test-deps: apt-get install" $pkgs $pkgs9
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 update -qq
  # shellcheck disable=SC2086
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends $pkgs $pkgs9 >/dev/null
fi

[ -d "$WHEELS" ] || { echo "test-deps: $WHEELS missing (the offline Snakemake 9 wheelhouse)" >&2; exit 1; }
for v in $VERSIONS; do
  venv=$VENVS/$v
  if [ -x "$venv/bin/snakemake" ] && [ "$("$venv/bin/snakemake" --version 2>/dev/null)" = "$v" ]; then
    continue
  fi
  echo "test-deps: Snakemake $v venv in $venv (offline wheels from $WHEELS)"
  $sudo rm -rf "$venv"
  $sudo /usr/bin/python3 -m venv --system-site-packages "$venv"
  # jsonschema pinned: Debian's 4.10 (pulled in by python3-nbformat) breaks snakemake.utils.validate.
  $sudo "$venv/bin/pip" install -q --no-index --find-links "$WHEELS" \
    "snakemake==$v" snakemake-executor-plugin-slurm==2.7.1 jsonschema==4.26.0
  got=$("$venv/bin/snakemake" --version)
  [ "$got" = "$v" ] || { echo "test-deps: $venv/bin/snakemake --version says $got, want $v" >&2; exit 1; }
done
