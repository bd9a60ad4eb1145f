#!/usr/bin/env bash
# Install Podman and serve its Docker-compatible API on unix:///run/podman.sock.
#
# Idempotent: safe to run any number of times. Needs root and Debian/Ubuntu (apt-get).
# PODMAN_SOCKET_GROUP=<group>: also let that group use the socket (e.g. the user Ray runs as).
# Prints `export DOCKER_HOST=unix:///run/podman.sock` on stdout at the end; everything else goes
# to stderr, so `eval "$(sudo infra/podman/setup.sh)"` works.
set -euo pipefail

SOCKET_PATH="${PODMAN_SOCKET:-/run/podman.sock}"
SOCKET_URL="unix://${SOCKET_PATH}"
CONF=/etc/containers/containers.conf
LOG=/var/log/podman-service.log
PYTHON="${PYTHON:-python3}"

log() { echo "[podman-setup] $*" >&2; }

require_root() {
    if [[ ${EUID} -ne 0 ]]; then
        log "must run as root (rootful Podman; the API socket lives in /run)"
        exit 1
    fi
}

missing_packages() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q "install ok installed" || echo "${pkg}"
    done
}

# fuse-overlayfs only where the kernel's overlayfs cannot be mounted (e.g. on some nested setups).
kernel_overlay_works() {
    local dir rc=0
    dir="$(mktemp -d)"
    mkdir -p "${dir}"/{lower,upper,work,merged}
    mount -t overlay overlay -o "lowerdir=${dir}/lower,upperdir=${dir}/upper,workdir=${dir}/work" \
        "${dir}/merged" 2>/dev/null || rc=1
    umount "${dir}/merged" 2>/dev/null || true
    rm -rf "${dir}"
    return "${rc}"
}

install_packages() {
    local wanted=(podman runc debootstrap)
    kernel_overlay_works || wanted+=(fuse-overlayfs)
    command -v curl >/dev/null || wanted+=(curl)  # pings the API when the docker SDK is absent
    # uidmap and slirp4netns serve rootless Podman only; this setup is rootful.
    local todo
    todo="$(missing_packages "${wanted[@]}")"
    if [[ -z "${todo}" ]]; then
        log "packages present: ${wanted[*]}"
        return
    fi
    log "installing: ${todo//$'\n'/ }"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends ${todo} >&2
}

write_conf() {
    mkdir -p "$(dirname "${CONF}")"
    local desired
    desired="$(cat <<'CONF'
# Written by agent-arena infra/podman/setup.sh.
# crun fails on these machines, so runc; no systemd, so cgroupfs and a file events logger;
# raising rlimits is not permitted here, so containers get explicit (not inherited) ulimits.
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
)"
    if [[ -f "${CONF}" ]] && [[ "$(cat "${CONF}")" == "${desired}" ]]; then
        log "${CONF} up to date"
        return
    fi
    [[ -f "${CONF}" ]] && cp "${CONF}" "${CONF}.bak.$(date +%s)"
    printf '%s\n' "${desired}" >"${CONF}"
    log "wrote ${CONF}"
}

# True when the Docker-API socket answers a ping (via the docker SDK if importable, else curl).
socket_answers() {
    [[ -S "${SOCKET_PATH}" ]] || return 1
    if "${PYTHON}" -c "import docker" 2>/dev/null; then
        "${PYTHON}" - "${SOCKET_URL}" <<'PY' 2>/dev/null
import sys, docker
sys.exit(0 if docker.DockerClient(base_url=sys.argv[1], timeout=3).ping() else 1)
PY
    else
        curl -fsS --max-time 3 --unix-socket "${SOCKET_PATH}" http://d/_ping >/dev/null 2>&1
    fi
}

share_socket() {
    [[ -n "${PODMAN_SOCKET_GROUP:-}" ]] || return 0
    chgrp "${PODMAN_SOCKET_GROUP}" "${SOCKET_PATH}"
    chmod 660 "${SOCKET_PATH}"
    log "socket shared with group ${PODMAN_SOCKET_GROUP}"
}

start_service() {
    if socket_answers; then
        log "API already answering on ${SOCKET_URL}"
        share_socket
        return
    fi
    rm -f "${SOCKET_PATH}"
    log "starting podman system service on ${SOCKET_URL} (log: ${LOG})"
    # From /: a service started inside a checkout breaks ("write child: broken pipe") once that dir is deleted.
    pushd / >/dev/null
    nohup setsid podman system service --time=0 "${SOCKET_URL}" >>"${LOG}" 2>&1 </dev/null &
    popd >/dev/null
    local i
    for i in $(seq 1 60); do
        if socket_answers; then
            log "API answering after ~$((i / 4)).$(((i % 4) * 25))s"
            share_socket
            return
        fi
        sleep 0.25
    done
    log "podman API did not answer within 15 s; tail of ${LOG}:"
    tail -n 20 "${LOG}" >&2 || true
    exit 1
}

main() {
    require_root
    install_packages
    write_conf
    start_service
    echo "export DOCKER_HOST=${SOCKET_URL}"
}

main "$@"
