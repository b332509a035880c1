#!/usr/bin/env bash
# Unpacks, if missing, the CUDA headers and link stubs that `make gpu-vet` needs (cuda.h, cufft.h
# and the rest of the toolkit's include/, stubs/libcuda.so and stubs/libcufft.so) from Debian 12's
# non-free package nvidia-cuda-dev (CUDA 11.8) into PREFIX (default /opt/kintsugi-cuda-vet), so
# that the CUDA build is type-checked and linked on a machine without a GPU or a toolkit:
#   scripts/cuda-vet-deps.sh && make gpu-vet CUDA_HOME=/opt/kintsugi-cuda-vet/usr
# Nothing is installed: the package is downloaded (about 770 MB) through a private apt source list
# that adds the non-free component, so the machine's apt configuration is left as it is, and only
# usr/include and usr/lib/x86_64-linux-gnu/stubs are unpacked (about 16 MB). The .deb is removed
# afterwards. Run as root, or as a user who may write PREFIX.
set -euo pipefail
prefix=${1:-/opt/kintsugi-cuda-vet}
if [ -f "$prefix/usr/include/cuda.h" ] && [ -f "$prefix/usr/include/cufft.h" ] &&
  [ -f "$prefix/usr/lib/x86_64-linux-gnu/stubs/libcuda.so" ]; then
  exit 0
fi
. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] || echo "cuda-vet-deps: written for Debian 12 (bookworm), this is ${PRETTY_NAME:-unknown}" >&2
work=$(mktemp -d /tmp/cuda-vet-deps.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/deb"
cat >"$work/sources.list" <<EOF
deb http://deb.debian.org/debian bookworm main non-free
deb http://deb.debian.org/debian bookworm-updates main non-free
deb http://deb.debian.org/debian-security bookworm-security main non-free
EOF
apt=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o APT::Sandbox::User=root)
echo "cuda-vet-deps: apt-get download nvidia-cuda-dev (non-free) into $prefix"
apt-get "${apt[@]}" update -qq
(cd "$work/deb" && apt-get "${apt[@]}" download -qq nvidia-cuda-dev)
mkdir -p "$prefix.tmp"
dpkg-deb --fsys-tarfile "$work"/deb/nvidia-cuda-dev_*.deb |
  tar -x -C "$prefix.tmp" ./usr/include ./usr/lib/x86_64-linux-gnu/stubs
rm -rf "$prefix"
mv "$prefix.tmp" "$prefix"
echo "cuda-vet-deps: CUDA_HOME=$prefix/usr ($(grep -m1 '#define CUDA_VERSION' "$prefix/usr/include/cuda.h"))"
