#!/usr/bin/env bash
# Builds a base image for deploy/Dockerfile from Debian packages, for machines that reach Debian's
# archive but no image registry: mmdebstrap makes a bookworm root file system with python3 (and
# venv) and iptables, and `podman import` (or `docker import`) turns it into an image.
#   deploy/offline-base.sh [TAG]        default TAG: localhost/ccb-base:bookworm
# Set CONTAINER_CLI=docker to import with docker. Needs root (or mmdebstrap's unshare mode).
set -euo pipefail
tag="${1:-localhost/ccb-base:bookworm}"
cli="${CONTAINER_CLI:-podman}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# merged-usr hook: a merged /usr without the usrmerge package (which pulls in perl).
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,iptables \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  bookworm "$work/rootfs.tar"
"$cli" import --change 'CMD ["/bin/bash"]' "$work/rootfs.tar" "$tag" >/dev/null
echo "$tag"
