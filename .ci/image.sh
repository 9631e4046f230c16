#!/usr/bin/env bash
# Builds the Dockerfile's image with Debian's podman and checks it: the ENTRYPOINT and the
# HEALTHCHECK run in a chroot of the image's own filesystem, as the image's USER with its Env
# (.ci/image_check.py). Not part of .ci/run: installing podman and making a base image add about
# 9 minutes, and containers cannot be *run* on the CI machines (crun cannot set rlimits there).
# No registry is reachable, so the base is made locally with debootstrap (BASE_IMAGE to skip).
# Needs root. Usage: .ci/image.sh   (about 9 minutes cold, 3.5 with the base already made)
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_IMAGE=${BASE_IMAGE:-localhost/logdx-base:bookworm}
IMAGE=${IMAGE:-localhost/logdx:check}
PIP_CONF=${PIP_CONF:-/etc/pip.conf}   # the host's pip settings (index, CA bundle), when it has one

if ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman debootstrap >&2
fi
if ! podman image exists "$BASE_IMAGE"; then
  ROOTFS=$(mktemp -d)
  trap 'rm -rf "$ROOTFS"' EXIT
  debootstrap --variant=minbase --include=python3,python3-venv,python3-dev,gcc,libc6-dev bookworm "$ROOTFS" \
    http://deb.debian.org/debian >&2
  tar -C "$ROOTFS" -c . | podman import - "$BASE_IMAGE" >&2
fi
# chroot isolation: no OCI runtime needed to build; the host's CA bundle and pip settings reach
# the build's pip (the same index the host uses); docker format keeps the HEALTHCHECK
podman build --format docker --isolation=chroot --network=host \
  -v /etc/ssl/certs:/etc/ssl/certs:ro $([ -f "$PIP_CONF" ] && echo "-v $PIP_CONF:/etc/pip.conf:ro") \
  --build-arg BASE="$BASE_IMAGE" -t "$IMAGE" .
unshare -m --propagation private python3 .ci/image_check.py "$IMAGE"
podman image unmount "$IMAGE" >/dev/null || true
