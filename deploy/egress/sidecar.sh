#!/usr/bin/env bash
# The egress allowlist proxy as a per-workload sidecar for plain `docker run` (docs/egress-image.md).
#
#   deploy/egress/sidecar.sh start NAME POLICY_FILE   networks and proxy for workload NAME; prints
#                                                     the `docker run` flags the workload needs
#   deploy/egress/sidecar.sh flags NAME               prints those flags again
#   deploy/egress/sidecar.sh stop NAME                removes the proxy and its networks (stop the
#                                                     workload first)
# then:  docker run $(deploy/egress/sidecar.sh flags NAME) IMAGE COMMAND...
#
# start creates NAME-net, an internal network (no route out) without a host address, on a /24 of
# its own, NAME-out, a bridge with a route out and inter-container traffic off, and the proxy
# NAME-egress on both, with POLICY_FILE's directory mounted read-only (the proxy reloads the file
# when it changes; keep the policy in a directory of its own, readable by the proxy's uid 10001).
# The workload joins only NAME-net, so the proxy is the only thing it can reach. A sidecar that
# shares the workload's network namespace (--network container:...) would not do: the workload
# would share the proxy's route out too.
#
# The proxy runs in transparent mode on its fixed address on NAME-net (.2), and the flags make
# that address the workload's DNS server: a client with no proxy settings reaches the allowlisted
# hosts (TLS routed by its server name, HTTP by its Host header), and any other name does not
# resolve. The flags also set the proxy variables, so that clients that read them get readable
# refusals; leave the -e flags out for a workload that should have none.
#
# Environment: EGRESS_IMAGE (default capybara-sandbox-egress:latest); EGRESS_OUTSIDE_NETWORK, an
# existing network to use as the proxy's way out instead of creating NAME-out; EGRESS_SUBNET, the
# /24 for NAME-net as A.B.C.0/24 (default: the first /24 of SUBNETS, 10.214.0.0/16, that Docker
# takes); EGRESS_LOG_LEVEL, ALLOW_CONNECT_PORTS and CAPYBARA_EGRESS_TEST_HOSTS (tests only)
# are passed on when set; EGRESS_LABEL=KEY=VALUE puts a label on everything start creates.
set -euo pipefail

IMAGE=${EGRESS_IMAGE:-capybara-sandbox-egress:latest}
PORT=3128
READY_SECONDS=30
# Where NAME-net's /24 is taken from when EGRESS_SUBNET is not set: outside the controller's address
# pool and Docker's default pools (test/deploy/default-ranges.test.ts checks every default range).
SUBNETS=10.214.0.0/16

die() { printf 'sidecar.sh: %s\n' "$*" >&2; exit 2; }
usage() { die "usage: $0 start NAME POLICY_FILE | flags NAME | stop NAME"; }

check_name() {
  [[ $1 =~ ^[a-z0-9][a-z0-9_.-]{0,40}$ ]] || die "NAME '$1' must be 1-41 of a-z 0-9 _ . - starting with a letter or digit"
}

# The proxy's address on NAME-net.
egress_address() {
  docker inspect -f "{{(index .NetworkSettings.Networks \"$1-net\").IPAddress}}" "$1-egress" 2>/dev/null
}

flags() {
  local name=$1 url="http://$1-egress:$PORT" v address
  address=$(egress_address "$name") && [[ -n $address ]] || die "$name-egress is not running on $name-net: $0 start $name POLICY_FILE first"
  # No raw sockets: with NET_RAW the workload could send packets with a neighbour's source address.
  printf -- '--network %s-net --dns %s --cap-drop NET_RAW' "$name" "$address"
  for v in HTTP_PROXY HTTPS_PROXY http_proxy https_proxy; do printf -- ' -e %s=%s' "$v" "$url"; done
  printf -- ' -e NO_PROXY=localhost,127.0.0.1,::1 -e no_proxy=localhost,127.0.0.1,::1\n'
}

stop() {
  local name=$1
  docker rm -f "$name-egress" >/dev/null 2>&1 || true
  docker network rm "$name-net" >/dev/null 2>&1 || true
  if [[ -z ${EGRESS_OUTSIDE_NETWORK:-} ]]; then docker network rm "$name-out" >/dev/null 2>&1 || true; fi
}

# Creates NAME-net on EGRESS_SUBNET, or on the first /24 of SUBNETS Docker does not refuse
# (another network may hold it); prints the subnet's first three octets. The gateway (.1) is
# named so that it shows in the network's IPAM config; with inhibit_ipv4 nobody holds it.
create_network() {
  local name=$1 n prefix
  shift
  if [[ -n ${EGRESS_SUBNET:-} ]]; then
    docker network create --internal --subnet "$EGRESS_SUBNET" --gateway "${EGRESS_SUBNET%.0/24}.1" -o com.docker.network.bridge.inhibit_ipv4=true "$@" "$name-net" >/dev/null
    printf '%s' "${EGRESS_SUBNET%.0/24}"
    return
  fi
  for n in $(seq 0 255); do
    prefix=${SUBNETS%.0.0/16}.$n
    if docker network create --internal --subnet "$prefix.0/24" --gateway "$prefix.1" -o com.docker.network.bridge.inhibit_ipv4=true "$@" "$name-net" >/dev/null 2>&1; then
      printf '%s' "$prefix"
      return
    fi
  done
  die "no free subnet in $SUBNETS for $name-net: set EGRESS_SUBNET"
}

start() {
  local name=$1 policy=$2 dir file outside labels=() pass=() v prefix address
  [[ -f $policy ]] || die "policy file '$policy' does not exist"
  dir=$(cd "$(dirname "$policy")" && pwd)
  file=$(basename "$policy")
  docker image inspect "$IMAGE" >/dev/null 2>&1 || die "image $IMAGE is not on the engine: bash scripts/build-images.sh"
  docker container inspect "$name-egress" >/dev/null 2>&1 && die "$name-egress already exists: $0 stop $name first"
  docker network inspect "$name-net" >/dev/null 2>&1 && die "$name-net already exists: $0 stop $name first"
  if [[ -n ${EGRESS_SUBNET:-} && ! $EGRESS_SUBNET =~ ^(10\.[0-9]{1,3}|172\.(1[6-9]|2[0-9]|3[01])|192\.168)\.[0-9]{1,3}\.0/24$ ]]; then
    die "EGRESS_SUBNET '$EGRESS_SUBNET' must be A.B.C.0/24 in a private range (10/8, 172.16/12, 192.168/16)"
  fi
  [[ -z ${EGRESS_LABEL:-} ]] || labels=(--label "$EGRESS_LABEL")
  for v in EGRESS_LOG_LEVEL ALLOW_CONNECT_PORTS CAPYBARA_EGRESS_TEST_HOSTS; do
    [[ -z ${!v:-} ]] || pass+=(-e "$v")
  done
  # Whatever fails from here on, nothing half-made stays behind.
  trap 'stop "$name"' ERR
  prefix=$(create_network "$name" "${labels[@]}")
  address=$prefix.2
  outside=${EGRESS_OUTSIDE_NETWORK:-$name-out}
  if [[ -z ${EGRESS_OUTSIDE_NETWORK:-} ]]; then
    docker network create -o com.docker.network.bridge.enable_icc=false "${labels[@]}" "$outside" >/dev/null
  fi
  docker run -d --name "$name-egress" --restart unless-stopped "${labels[@]}" \
    --network "$outside" \
    --cap-drop ALL --security-opt no-new-privileges --read-only --pids-limit 256 --memory 256m \
    -v "$dir:/etc/capybara-egress:ro" -e "EGRESS_POLICY_FILE=/etc/capybara-egress/$file" "${pass[@]}" \
    -e "EGRESS_TRANSPARENT_LISTEN=$address" \
    "$IMAGE" >/dev/null
  # The proxy waits for this address to appear, then listens on it and on its own port.
  docker network connect --ip "$address" "$name-net" "$name-egress"
  # Ready when the proxy answers its own health endpoint (the image's health check, run now).
  local waited=0
  until docker exec "$name-egress" node -e "require('http').get({host:'127.0.0.1',port:$PORT,path:'/healthz',timeout:1000},r=>process.exit(r.statusCode===200?0:1)).on('error',()=>process.exit(1))" 2>/dev/null; do
    # A proxy that refused its policy has exited: say why at once instead of waiting.
    if (( waited >= READY_SECONDS )) || [[ $(docker inspect -f '{{.State.Status}} {{.RestartCount}}' "$name-egress") != 'running 0' ]]; then
      printf 'sidecar.sh: %s-egress did not become ready; its log:\n' "$name" >&2
      docker logs --tail 20 "$name-egress" >&2 || true
      false
    fi
    sleep 1
    waited=$((waited + 1))
  done
  trap - ERR
  flags "$name"
}

[[ $# -ge 2 ]] || usage
cmd=$1 name=$2
check_name "$name"
case $cmd in
  start) [[ $# -eq 3 ]] || usage; start "$name" "$3" ;;
  flags) [[ $# -eq 2 ]] || usage; flags "$name" ;;
  stop) [[ $# -eq 2 ]] || usage; stop "$name" ;;
  *) usage ;;
esac
