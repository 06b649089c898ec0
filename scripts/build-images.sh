#!/usr/bin/env bash
# Builds the product images without any container registry, tagged with the names written once
# in common/images.json (capybara-sandbox:latest, capybara-sandbox-egress:latest, ...):
#   sandbox  image/sandbox/Dockerfile
#   egress   image/egress/Dockerfile
#   proxy    haproxy/Dockerfile
#   cli      image/cli/Dockerfile (the plugin and its CLI; on the egress base)
#
# Each Dockerfile takes its base image as the BASE build argument. Here every base is a Debian
# trixie root filesystem made by mmdebstrap from the machine's reachable Debian mirror (already
# holding the packages the Dockerfile's APT_PACKAGES line names) and loaded with `docker import`.
#
# Nothing is rebuilt when its inputs have not changed: a base is tagged with the hash of its
# package list and build options, an image carries the hash of its base and build context in the
# label dev.capybara.content-hash (also its second tag). A warm run costs a few seconds.
#
# Environment:
#   CAPYBARA_DEBIAN_MIRROR   Debian mirror for mmdebstrap (default http://deb.debian.org/debian)
#   CAPYBARA_FORCE_REBUILD=1 ignore the hashes and build everything again
# Usage: bash scripts/build-images.sh [sandbox|egress|proxy|cli ...]   (default: all four)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

SUITE=trixie
MIRROR=${CAPYBARA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Bump when the way bases are made changes, so old bases are not reused.
RECIPE_VERSION=1
HASH_LABEL=dev.capybara.content-hash

log() { printf '[build-images] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The image names, from the file the TypeScript code reads them from (common/images.ts).
command -v node >/dev/null || die "node is not installed (Node.js 20, see README.md)"
declare -A IMAGE
while IFS='=' read -r key value; do IMAGE[$key]=$value; done < <(
  node -e 'for (const [k, v] of Object.entries(require("./common/images.json").images)) console.log(`${k}=${v}`)')
for t in sandbox egress proxy cli; do [[ -n ${IMAGE[$t]:-} ]] || die "common/images.json names no $t image"; done

sha() { sha256sum | cut -c1-64; }

# The package list is written once, in the Dockerfile's ARG APT_PACKAGES line.
apt_packages() {
  local line
  line=$(grep -m1 -E '^ARG APT_PACKAGES=' "$1") || die "$1 has no ARG APT_PACKAGES line"
  line=${line#ARG APT_PACKAGES=}
  line=${line//\"/}
  echo "$line"
}

# Prints a progress line every 30 s while a long step (mmdebstrap, docker build) runs, so a cold
# build of several minutes is never silent. Usage: heartbeat WHAT & hb=$!; ...; stop_heartbeat $hb
heartbeat() {
  local what=$1 start=$SECONDS
  while sleep 30; do log "$what: still running ($((SECONDS - start))s)"; done
}
stop_heartbeat() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

image_hash() { docker image inspect --format "{{index .Config.Labels \"$HASH_LABEL\"}}" "$1" 2>/dev/null || true; }

# mmdebstrap options: minimal variant, no documentation, manuals or translations (copyright files
# stay), no apt lists or caches left in the image.
MM_OPTS=(
  --variant=minbase
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-include=/usr/share/locale/locale.alias'
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb "$1"/var/log/*.log'
)

# base_tag NAME DOCKERFILE -> prints the tag of the base for that Dockerfile (building it if missing)
build_base() {
  local name=$1 dockerfile=$2 pkgs hash tag
  pkgs=$(apt_packages "$dockerfile")
  hash=$(printf '%s\n' "$RECIPE_VERSION" "$SUITE" "$MIRROR" "$pkgs" "${MM_OPTS[@]}" | sha)
  tag="capybara-base-$name:${hash:0:16}"
  if [[ -z "${CAPYBARA_FORCE_REBUILD:-}" ]] && docker image inspect "$tag" >/dev/null 2>&1; then
    log "base $tag is up to date"
    docker tag "$tag" "capybara-base-$name:latest"
    echo "$tag"; return
  fi
  log "building base $tag with mmdebstrap ($SUITE: $pkgs)"
  local started=$SECONDS logfile
  logfile=$(mktemp)
  heartbeat "base $name (mmdebstrap)" >/dev/null & local hb=$!
  # shellcheck disable=SC2086  # the package list is split on purpose
  if ! mmdebstrap "${MM_OPTS[@]}" --include="$(echo $pkgs | tr ' ' ',')" "$SUITE" - "$MIRROR" 2>"$logfile" \
      | docker import --change "LABEL $HASH_LABEL=$hash" --change 'CMD ["bash"]' - "$tag" >/dev/null; then
    stop_heartbeat "$hb"
    tail -n 30 "$logfile" >&2; rm -f "$logfile"
    die "mmdebstrap or docker import failed for base $name"
  fi
  stop_heartbeat "$hb"
  rm -f "$logfile"
  docker tag "$tag" "capybara-base-$name:latest"
  log "base $tag built in $((SECONDS - started))s"
  echo "$tag"
}

# build_image TAG DOCKERFILE CONTEXT BASE_TAG CONTEXT_HASH
build_image() {
  local tag=$1 dockerfile=$2 context=$3 base=$4 ctxhash=$5 hash base_id
  base_id=$(docker image inspect --format '{{.Id}}' "$base")
  hash=$(printf '%s\n' "$base_id" "$ctxhash" | sha)
  if [[ -z "${CAPYBARA_FORCE_REBUILD:-}" && "$(image_hash "$tag")" == "$hash" ]]; then
    log "$tag is up to date (${hash:0:12})"
    return
  fi
  log "building $tag (${hash:0:12})"
  local started=$SECONDS
  local logfile
  logfile=$(mktemp)
  heartbeat "$tag (docker build)" & local hb=$!
  if ! docker build --quiet --pull=false --force-rm \
      --build-arg "BASE=$base" \
      --label "$HASH_LABEL=$hash" \
      -f "$dockerfile" -t "$tag" -t "${tag%:*}:${hash:0:12}" "$context" >/dev/null 2>"$logfile"; then
    stop_heartbeat "$hb"
    tail -n 30 "$logfile" >&2; rm -f "$logfile"
    die "docker build of $tag failed"
  fi
  stop_heartbeat "$hb"
  rm -f "$logfile"
  log "$tag built in $((SECONDS - started))s"
}

# Hash of a list of files (paths relative to the repository root), names included.
hash_files() {
  local f
  for f in "$@"; do
    printf '%s\n' "$f"
    sha256sum < "$f"
  done | sha
}

TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(sandbox egress proxy cli)
for t in "${TARGETS[@]}"; do
  case $t in sandbox|egress|proxy|cli) ;; *) die "unknown image '$t' (sandbox, egress, proxy or cli)";; esac
done
selected() { local t; for t in "${TARGETS[@]}"; do [[ $t == "$1" ]] && return 0; done; return 1; }

command -v docker >/dev/null || die "docker is not installed (run scripts/docker-up.sh)"
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || die "no Docker engine answers (run scripts/docker-up.sh)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (run scripts/docker-up.sh)"

TOTAL_START=$SECONDS

# Bases are independent: build the missing ones in parallel (mostly download and dpkg time).
declare -A DOCKERFILE=([sandbox]=image/sandbox/Dockerfile [egress]=image/egress/Dockerfile [proxy]=haproxy/Dockerfile [cli]=image/cli/Dockerfile)
# The cli image needs the same packages as the egress image (Node.js), so it shares its base.
declare -A BASE_OF=([sandbox]=sandbox [egress]=egress [proxy]=proxy [cli]=egress)
declare -A BASE PID
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mapfile -t BASES < <(for t in "${TARGETS[@]}"; do echo "${BASE_OF[$t]}"; done | sort -u)
for b in "${BASES[@]}"; do
  build_base "$b" "${DOCKERFILE[$b]}" >"$TMP/$b.base" &
  PID[$b]=$!
done
for b in "${BASES[@]}"; do
  wait "${PID[$b]}" || die "base for $b failed"
done
for t in "${TARGETS[@]}"; do
  BASE[$t]=$(cat "$TMP/${BASE_OF[$t]}.base")
done

if selected proxy; then
  mapfile -t files < <(cd haproxy && ls -1 Dockerfile haproxy.cfg ./*.map ./*.lua | sort)
  build_image "${IMAGE[proxy]}" haproxy/Dockerfile haproxy "${BASE[proxy]}" \
    "$(cd haproxy && hash_files "${files[@]}")"
fi

if selected sandbox; then
  mapfile -t files < <(cd image/sandbox && find . -type f | sort)
  build_image "${IMAGE[sandbox]}" image/sandbox/Dockerfile image/sandbox "${BASE[sandbox]}" \
    "$(cd image/sandbox && hash_files "${files[@]}")"
fi

# A Node.js image from a staged context: no registry is reachable from inside `docker build`, so
# the given source folders are compiled here (with the project's compiler options; work in
# progress elsewhere in the tree cannot break the build), and the package manifests and production
# node_modules are staged beside them. Rebuilt only when the base or an input changed.
# STAGED_FN runs once the production node_modules are in the context.
#   build_node_image NAME TAG DOCKERFILE "SOURCE DIRS" "OTHER INPUT FILES" [STAGE_EXTRA_FN] [STAGED_FN]
build_node_image() {
  local name=$1 tag=$2 dockerfile=$3 sources=$4 inputs=$5 extra=${6:-} staged=${7:-}
  local files ctxhash base_id started stage include=""
  # shellcheck disable=SC2086 # word lists on purpose
  mapfile -t files < <({ find $sources -type f; ls -1 package.json package-lock.json tsconfig.json "$dockerfile" $inputs 2>/dev/null; } | sort)
  ctxhash=$(hash_files "${files[@]}")
  base_id=$(docker image inspect --format '{{.Id}}' "${BASE[$name]}")
  if [[ -z "${CAPYBARA_FORCE_REBUILD:-}" && "$(image_hash "$tag")" == "$(printf '%s\n' "$base_id" "$ctxhash" | sha)" ]]; then
    log "$tag is up to date"
    return
  fi
  started=$SECONDS
  stage=$TMP/$name
  mkdir -p "$stage/dist"
  [[ -d node_modules ]] || npm ci --no-audit --no-fund --loglevel=error
  for dir in $sources; do
    if [[ -d $dir ]]; then include+="${include:+, }\"$ROOT/$dir/**/*.ts\""; else include+="${include:+, }\"$ROOT/$dir\""; fi
  done
  log "compiling $sources (tsc)"
  cat > "$TMP/tsconfig.$name.json" <<JSON
{
  "extends": "$ROOT/tsconfig.json",
  "compilerOptions": { "rootDir": "$ROOT", "outDir": "$stage/dist", "declaration": false, "sourceMap": false, "incremental": false },
  "include": [$include],
  "exclude": []
}
JSON
  npx --no-install tsc -p "$TMP/tsconfig.$name.json"
  cp package.json package-lock.json "$stage/"
  cp "$dockerfile" "$stage/Dockerfile"
  [[ -z $extra ]] || "$extra" "$stage"
  log "installing production dependencies into the staging context (npm ci --omit=dev)"
  (cd "$stage" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
  [[ -z $staged ]] || "$staged" "$stage"
  log "$name context staged in $((SECONDS - started))s"
  build_image "$tag" "$stage/Dockerfile" "$stage" "${BASE[$name]}" "$ctxhash"
}

stage_egress_extra() {
  mkdir -p "$1/policy"
  cp policy/default-policy.yaml "$1/policy/"
  [[ ! -f image/egress/.dockerignore ]] || cp image/egress/.dockerignore "$1/.dockerignore"
}

# The egress command as one module (scripts/build.mjs, EGRESS_BUNDLE), the image's entrypoint:
# bundled from the staged compile with the staged production packages.
bundle_egress() {
  log "bundling the egress command (esbuild)"
  node --input-type=module -e "import { bundleEgress } from '$ROOT/scripts/build.mjs'; process.exitCode = await bundleEgress(process.argv[1]);" "$1" \
    || die "bundling the egress command failed (esbuild's errors above)"
}

# The plugin's manifest and deploy/host-stub.mjs, the stand-in host of deploy/compose.yaml.
stage_cli_extra() {
  mkdir -p "$1/deploy"
  cp -r .capybara-plugin "$1/"
  cp deploy/host-stub.mjs "$1/deploy/"
}

if selected egress; then
  [[ -f proxy/cli.ts ]] || die "proxy/cli.ts is missing: the egress image needs the egress proxy sources"
  build_node_image egress "${IMAGE[egress]}" image/egress/Dockerfile "common proxy policy" \
    "image/egress/.dockerignore scripts/build.mjs" stage_egress_extra bundle_egress
fi

if selected cli; then
  # The plugin (dist/index.mjs and the controller) and the operator CLI.
  build_node_image cli "${IMAGE[cli]}" image/cli/Dockerfile "common policy controller index.mts" \
    ".capybara-plugin/plugin.json deploy/host-stub.mjs" stage_cli_extra
fi

log "done in $((SECONDS - TOTAL_START))s"
for t in "${TARGETS[@]}"; do
  docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' "${IMAGE[$t]}" >&2
done
