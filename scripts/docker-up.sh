#!/usr/bin/env bash
# Makes sure a Docker engine answers on this machine, for CI and for local test runs.
#
# - installs what is missing with apt: docker.io (engine, CLI, containerd, runc), mmdebstrap
#   (offline base images, scripts/build-images.sh) and the few tools those need;
# - when no engine answers, starts dockerd in the background (there is no systemd here), logging
#   to /var/log/capybara-dockerd.log, and waits until it answers;
# - registers gVisor's runsc (Debian package runsc) as a runtime named "runsc" when the engine
#   does not list it: an entry in /etc/docker/daemon.json and a SIGHUP, which dockerd answers by
#   reloading its runtimes (running containers are untouched). The controller's runsc test needs
#   it registered; whether runsc can then start containers on this machine is that test's probe.
# It never stops or restarts an engine that already answers.
#
# Environment: DOCKER_UP_TIMEOUT (seconds to wait for the engine, default 60).
set -euo pipefail

log() { printf '[docker-up] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

TIMEOUT=${DOCKER_UP_TIMEOUT:-60}
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || die "run as root (or install sudo): installing packages and starting dockerd need it"
  SUDO=sudo
fi

# command -> Debian package that provides it
declare -A NEED=(
  [dockerd]=docker.io
  [docker]=docker.io
  [mmdebstrap]=mmdebstrap
  [iptables]=iptables
  [xz]=xz-utils
  [runsc]=runsc
)
missing=()
for cmd in "${!NEED[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${NEED[$cmd]}")
done
# mmdebstrap verifies trixie's Release file with Debian's archive keys.
[[ -e /usr/share/keyrings/debian-archive-keyring.gpg ]] || missing+=(debian-archive-keyring)
if [[ ${#missing[@]} -gt 0 ]]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  log "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

engine_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if engine_answers; then
  log "Docker engine $(docker version --format '{{.Server.Version}}') already answers"
else
  if pgrep -x dockerd >/dev/null 2>&1; then
    log "dockerd is running but does not answer yet; waiting"
  else
    # A stale pid file from a killed daemon makes the new one refuse to start.
    for pidfile in /var/run/docker.pid /run/docker/containerd/containerd.pid; do
      if [[ -f $pidfile ]] && ! kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; then
        $SUDO rm -f "$pidfile"
      fi
    done
    log "starting dockerd (log: /var/log/capybara-dockerd.log)"
    # setsid + nohup: the daemon outlives this script and the CI step that ran it. Its open-file
    # limit is what containers get (as systemd's docker.service sets it, not a login shell's 1024):
    # the egress proxy lowers its caps to fit a small one. The soft limit goes up to the hard one,
    # which needs no privilege.
    nofile=$($SUDO bash -c 'ulimit -Hn')
    [[ $nofile == unlimited ]] && nofile=1048576
    $SUDO setsid nohup prlimit --nofile="$nofile:$nofile" dockerd >>/var/log/capybara-dockerd.log 2>&1 < /dev/null &
  fi

  deadline=$((SECONDS + TIMEOUT))
  until engine_answers; do
    if (( SECONDS >= deadline )); then
      tail -n 40 /var/log/capybara-dockerd.log >&2 2>/dev/null || true
      die "no Docker engine answered within ${TIMEOUT}s"
    fi
    sleep 1
  done
  log "Docker engine $(docker version --format '{{.Server.Version}}') is ready"
fi

# runsc: registered once; a daemon.json written by someone else keeps its other settings.
if command -v runsc >/dev/null 2>&1 && ! docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; then
  log "registering runsc ($(command -v runsc)) with the engine"
  $SUDO mkdir -p /etc/docker
  $SUDO node -e '
    const fs = require("fs");
    const file = "/etc/docker/daemon.json";
    const config = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, "utf8") || "{}") : {};
    config.runtimes = { ...(config.runtimes || {}), runsc: { path: process.argv[1] } };
    fs.writeFileSync(file, JSON.stringify(config, null, 2) + "\n");
  ' "$(command -v runsc)"
  $SUDO kill -HUP "$(pgrep -x -o dockerd)"
  deadline=$((SECONDS + TIMEOUT))
  until docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; do
    (( SECONDS >= deadline )) && die "dockerd did not load the runsc runtime from /etc/docker/daemon.json"
    sleep 1
  done
  log "runsc registered"
fi
