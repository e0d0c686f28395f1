#!/usr/bin/env bash
# The Debian base the project's images are built on where no registry can be pulled (this
# project's CI machine): `debootstrap --variant=minbase bookworm` with Python and what the
# images need from Debian, imported with `docker import`. On a Spark the Dockerfiles build
# from the official bases instead (their `BASE` build argument; docs/deploy.md says how the
# two differ). Needs root (debootstrap) and the Docker engine of DOCKER_HOST.
#
# Usage: tools/base_image.sh [ARCH]   (default: this machine's, e.g. amd64)
# Prints the image's name. The root file system is kept as a tarball under
# ~/.cache/sparkpanel/images, keyed by what it holds, so a machine debootstraps it once.
set -euo pipefail

arch=${1:-$(dpkg --print-architecture)}
# python3-venv: the images install into a virtual environment (Debian's own Python refuses
# system-wide pip installs); passwd: useradd; ca-certificates, netbase and tzdata: what the
# official python:*-slim-bookworm images add to Debian (TLS, /etc/services, TIME_ZONE).
include="python3,python3-venv,passwd,ca-certificates,netbase,tzdata"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
key=$(printf '%s\n' bookworm minbase "$arch" "$include" v1 | sha256sum | cut -c1-12)
rootfs="sparkpanel-rootfs:bookworm-$arch-$key"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/sparkpanel/images"
tarball="$cache/bookworm-minbase-$arch-$key.tar"
# The machine's own certificate authorities (/usr/local/share/ca-certificates): where its
# way to PyPI passes a TLS-inspecting proxy, pip in the image must trust what the machine
# trusts. They are a thin layer over the cached root file system (they may change between
# boots), and the image's pip is pointed at the system bundle that holds them.
cas=$(find /usr/local/share/ca-certificates -maxdepth 1 -name '*.crt' 2>/dev/null | sort)
ca_key=$(if [ -n "$cas" ]; then cat $cas | sha256sum | cut -c1-12; else echo none; fi)
name="sparkpanel-base:bookworm-$arch-$key-$ca_key"

if docker image inspect "$name" >/dev/null 2>&1; then
  echo "$name"
  exit 0
fi
if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || { echo "!! debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "!! debootstrap needs root" >&2; exit 1; }
  mkdir -p "$cache"
  root=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$root"' EXIT
  echo ">> debootstrap --variant=minbase bookworm ($arch) from $mirror" >&2
  if [ "$arch" = "$(dpkg --print-architecture)" ]; then
    debootstrap --variant=minbase --arch "$arch" --include="$include" bookworm "$root" "$mirror" >&2
  else
    # Another architecture (arm64 for a Spark): the second stage runs under QEMU's user
    # emulation (Debian's qemu-user-static registers itself with binfmt_misc).
    debootstrap --foreign --variant=minbase --arch "$arch" --include="$include" bookworm "$root" "$mirror" >&2
    chroot "$root" /debootstrap/debootstrap --second-stage >&2
  fi
  # What a container needs no copy of: package lists and caches (smaller, reproducible).
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/tmp/*
  tar --numeric-owner -C "$root" -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  rm -rf "$root"
  trap - EXIT
  # Older bases of this architecture (another package list) are no longer used.
  find "$cache" -maxdepth 1 -name "bookworm-minbase-$arch-*.tar" ! -name "${tarball##*/}" -delete
fi
if ! docker image inspect "$rootfs" >/dev/null 2>&1; then
  docker import --platform "linux/$arch" \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
    "$tarball" "$rootfs" >/dev/null
fi
if [ -z "$cas" ]; then
  docker tag "$rootfs" "$name"
else
  context=$(mktemp -d)
  trap 'rm -rf "$context"' EXIT
  # shellcheck disable=SC2086
  cp $cas "$context/"
  printf '%s\n' "FROM $rootfs" "COPY *.crt /usr/local/share/ca-certificates/" \
    "RUN update-ca-certificates" "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt" \
    > "$context/Dockerfile"
  docker build -q --network none -t "$name" "$context" >/dev/null
fi
echo "$name"
