#!/bin/sh
# maintd's container entrypoint (under tini): give the process a user name, then exec the command.
#
# Kubernetes (runAsUser), OpenShift (a random UID) and `docker run --user` may run the image under a UID
# that has no entry in /etc/passwd, which is read-only. The Spark driver's JVM cannot start without a user
# name (Hadoop's login fails: "invalid null input: name", and Java's user.home is "?"), so when the UID
# has no entry, one is written to a writable temporary directory and served through nss_wrapper
# (LD_PRELOAD), for this process and every process it starts.
set -eu

if ! id -un >/dev/null 2>&1; then
    nss_dir="$(mktemp -d "${TMPDIR:-/tmp}/maintd-nss.XXXXXX")"
    printf 'maintd:x:%s:%s:maintd:%s:/usr/sbin/nologin\n' "$(id -u)" "$(id -g)" "${HOME:-/tmp}" >"$nss_dir/passwd"
    if id -gn >/dev/null 2>&1; then
        getent group "$(id -g)" >"$nss_dir/group"
    else
        printf 'maintd:x:%s:\n' "$(id -g)" >"$nss_dir/group"
    fi
    export LD_PRELOAD="libnss_wrapper.so${LD_PRELOAD:+ $LD_PRELOAD}"
    export NSS_WRAPPER_PASSWD="$nss_dir/passwd" NSS_WRAPPER_GROUP="$nss_dir/group"
fi
exec "$@"
