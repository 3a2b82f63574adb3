#!/usr/bin/env sh
# Install what the local cluster of the distributed profile (deploy/local_cluster.py, tests/deploy/) runs from:
# Debian's Postgres, Redis and a single-node Ceph (mon, osd, mgr, radosgw 16.2). Idempotent: nothing is
# fetched when every package is already installed. The list is deploy/local_cluster.py's DEBIAN_PACKAGES.
set -eu
PACKAGES="postgresql redis-server ceph-mon ceph-osd ceph-mgr radosgw"
missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "cluster packages already installed: $PACKAGES"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update
# --no-install-recommends: the services are started by deploy/local_cluster.py, not by systemd units
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends $missing
echo "installed:$missing"
