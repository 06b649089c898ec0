/**
 * The bash programs the controller runs inside a sandbox. Each is a fixed script plus
 * arguments; everything a caller supplies (command, env, cwd, paths) travels base64-encoded,
 * so exec create bodies stay plain ASCII with no JSON escapes whatever the caller sends.
 *
 * A command runs as uid 1000 in its own session (setsid) whose id is written to a control
 * file `/tmp/.capybara-exec-<tag>-<uuid>`; killing means SIGKILL to every process of that
 * session, found by walking /proc with shell builtins only (a kill must not need to fork
 * when a fork bomb has used up the pids limit). `timeout -s KILL` inside the sandbox is the
 * backstop when the controller that started the command is gone.
 */
import { checkTag } from '../spec/index.js';

export const SANDBOX_USER = '1000:1000';
export const ROOT_USER = '0:0';
const CONTROL_FILE_PREFIX = '/tmp/.capybara-exec-';
/** Printed by kill scripts once they ran; its absence means the kill could not start. */
export const KILL_OK_MARKER = 'capybara-kill-ok';
/** Seconds the in-sandbox backstop adds to the caller's timeout. */
export const BACKSTOP_GRACE_SECONDS = 5;
/** Inline payloads above this go through a staged file (exec bodies are capped at 32 KiB). */
export const MAX_INLINE_PAYLOAD = 24 * 1024;

/**
 * Printed to stderr, with exit code SANDBOX_FULL_EXIT, by every script that found the sandbox at
 * its process limit before starting anything: the command did not run (sandbox-full.ts).
 */
export const SANDBOX_FULL_MARKER = 'capybara-sandbox-full';
export const SANDBOX_FULL_EXIT = 190;
/**
 * The first byte the exec wrapper writes to stderr once its room check passed, before the
 * command runs: its presence proves Docker started the exec, so nothing the command prints can
 * be taken for Docker's "OCI runtime exec failed" line (sandbox-full.ts). The controller removes
 * it before the caller sees stderr.
 */
export const STARTED_BYTE = 0x06;
// A builtin, as an octal escape: no fork, and no byte of the script outside printable ASCII.
const STARTED_PRINTF = `printf '\\${STARTED_BYTE.toString(8).padStart(3, '0')}' >&2`;
/** Free process slots a command needs to start: wrapper, setsid, session shell, timeout, shell. */
const START_HEADROOM = 8;

// Builtins only (read, test, arithmetic, echo): at the pids limit any fork blocks in bash's retry
// loop for ~15 s and then fails, which would look like the command's own failure. The sandbox's
// own cgroup is mounted at /sys/fs/cgroup/pids (cgroup v1) or /sys/fs/cgroup (v2).
const ROOM_CHECK = String.raw`
for d in /sys/fs/cgroup/pids /sys/fs/cgroup; do
  { read -r cur < "$d/pids.current" && read -r max < "$d/pids.max"; } 2>/dev/null || continue
  if [ "$max" != max ] && (( max - cur < ${START_HEADROOM} )); then
    echo "${SANDBOX_FULL_MARKER} $cur/$max" >&2
    exit ${SANDBOX_FULL_EXIT}
  fi
  break
done
`;

/** Exit codes of the file scripts, mapped to error codes by the provider. */
export const FILE_EXIT = {
  permissionDenied: 43,
  notFound: 44,
  isDirectory: 45,
  failed: 46,
} as const;

const UUID_GLOB = '????????-????-????-????-????????????';

export function encodeArg(value: string | Uint8Array): string {
  return Buffer.from(value).toString('base64');
}

/** Single-quotes a string for bash; any byte sequence survives. */
export function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

export function controlFile(tag: string, uuid: string): string {
  return `${CONTROL_FILE_PREFIX}${checkTag(tag)}-${uuid}`;
}

/** What the session runs: exports, cd, then the caller's command. */
export function commandPayload(command: string, env: Readonly<Record<string, string>>, cwd: string | undefined): string {
  const lines: string[] = [];
  for (const [key, value] of Object.entries(env)) lines.push(`export ${key}=${shellQuote(value)}`);
  if (cwd !== undefined) {
    lines.push(`cd -- ${shellQuote(cwd)} || { echo ${shellQuote(`capybara: cannot change directory to ${cwd}`)} >&2; exit 126; }`);
  }
  lines.push(command);
  return lines.join('\n');
}

// Runs as the session leader: records the session id, runs the command under the backstop,
// and removes the control file only when no process of the session is left (a background child
// still holding the output must stay findable for a timeout, abort or killTagged).
const SESSION = String.raw`
printf "%s\n" "$$" > "$1" || exit 125
timeout -s KILL "$2" bash -c "$3"
rc=$?
for p in /proc/[0-9]*; do
  [ "${'$'}{p#/proc/}" = "$$" ] && continue
  read -r line < "$p/stat" 2>/dev/null || continue
  read -r -a f <<< "${'$'}{line##*) }"
  [ "${'$'}{f[3]}" = "$$" ] && exit $rc
done
rm -f -- "$1"
exit $rc
`;

// $1 control file, $2 backstop seconds, $3 base64 payload or @staged-file, $4 the session script.
const WRAPPER = String.raw`${ROOM_CHECK}
${STARTED_PRINTF}
case $3 in
  @*) f=${'$'}{3#@}; script=$(cat -- "$f") || exit 125; rm -f -- "$f" ;;
  *) script=$(printf '%s' "$3" | base64 -d) || exit 125 ;;
esac
exec setsid -w bash -c "$4" capybara-session "$1" "$2" "$script"
`;

export function wrapperCmd(ctlFile: string, backstopSeconds: number, payload: string): string[] {
  return ['bash', '-c', WRAPPER, 'capybara-exec', ctlFile, String(backstopSeconds), payload, SESSION];
}

/** Stages a large payload: stdin is written to `file` (mode 0600). */
export function stageCmd(file: string): string[] {
  return ['bash', '-c', `${ROOM_CHECK}umask 077; cat > "$1"`, 'capybara-stage', file];
}

// Kills every process whose session id is listed in the given control files, scanning /proc
// again until a scan finds none of them alive. A zombie (state Z, or X while it goes) has ended
// already: kill succeeds on it, so counting it would rescan /proc for as long as its parent or
// PID 1 leaves it unreaped (50 scans, seconds, after a fork bomb under an init that reaps slowly).
const KILL_SESSIONS = String.raw`
kill_session() {
  local sid=$1 round p line alive
  local -a f
  for ((round = 0; round < 50; round++)); do
    alive=0
    for p in /proc/[0-9]*; do
      read -r line < "$p/stat" 2>/dev/null || continue
      # Fields after "(comm) ": state ppid pgrp session ...
      read -r -a f <<< "${'$'}{line##*) }"
      [ "${'$'}{f[3]}" = "$sid" ] || continue
      case ${'$'}{f[0]} in Z|X) continue ;; esac
      kill -KILL "${'$'}{p#/proc/}" 2>/dev/null && alive=1
    done
    [ "$alive" = 0 ] && return 0
  done
}
for c in "$@"; do
  [ -f "$c" ] || continue
  read -r sid < "$c" 2>/dev/null
  case $sid in ''|*[!0-9]*) ;; *) kill_session "$sid" ;; esac
  rm -f -- "$c"
done
echo ${KILL_OK_MARKER}
`;

/** Kills the sessions of the given control files (one command, or glob patterns). */
export function killFilesCmd(files: readonly string[]): string[] {
  // Patterns are expanded by bash here; tags and uuids contain no other glob characters.
  return ['bash', '-O', 'nullglob', '-c', `set -- ${files.join(' ')}\n${KILL_SESSIONS}`, 'capybara-kill'];
}

export function killTaggedCmd(tags: readonly string[]): string[] {
  return killFilesCmd(tags.map((tag) => `${CONTROL_FILE_PREFIX}${checkTag(tag)}-${UUID_GLOB}`));
}

/** As uid 1000, `kill -9 -1` reaches every process of the sandbox user and none of root's. */
export function killAllCmd(): string[] {
  const script = String.raw`
for round in 1 2 3 4 5 6 7 8 9 10; do kill -KILL -1 2>/dev/null || break; done
rm -f -- ${CONTROL_FILE_PREFIX}*
echo ${KILL_OK_MARKER}
`;
  return ['bash', '-O', 'nullglob', '-c', script, 'capybara-killall'];
}

// Classifies an open failure by its C-locale message.
const CLASSIFY = String.raw`${ROOM_CHECK}
classify() {
  case $1 in
    *"No such file"*|*"Not a directory"*) echo "$1" >&2; exit ${FILE_EXIT.notFound} ;;
    *"Permission denied"*|*"Read-only file system"*|*"Operation not permitted"*) echo "$1" >&2; exit ${FILE_EXIT.permissionDenied} ;;
    *"Is a directory"*) echo "$1" >&2; exit ${FILE_EXIT.isDirectory} ;;
    *) echo "$1" >&2; exit ${FILE_EXIT.failed} ;;
  esac
}
export LC_ALL=C
p=$(printf '%s' "$1" | base64 -d) || exit ${FILE_EXIT.failed}
`;

// Files are opened with O_NONBLOCK (dd's nonblock flags): a FIFO the sandbox swaps in after the
// type check then reads as empty or fails at once, where a plain open would wait for a writer.
// Reads use fullblock, as head -c did: without it a short read (procfs, FUSE) counts as a whole
// block and the result is cut short without an error.
const DD = 'dd bs=64K status=none';

export function readFileCmd(path: string, maxBytes: number): string[] {
  // Only regular files: opening a FIFO the sandbox planted would block for good, and a device
  // (/dev/zero behind a symlink) would stream without end.
  const script = `${CLASSIFY}
[ -d "$p" ] && classify "$p: Is a directory"
[ -e "$p" ] && [ ! -f "$p" ] && classify "$p: not a regular file"
err=$(${DD} if="$p" iflag=nonblock count=0 2>&1) || classify "$err"
exec ${DD} if="$p" iflag=nonblock,count_bytes,fullblock count="$2"
`;
  return ['bash', '-c', script, 'capybara-read', encodeArg(path), String(maxBytes)];
}

/**
 * Writes stdin to the path, creating parent directories. With `confineTo`, the resolved path
 * must stay below that directory (the root-only skills mount: a symlink planted there must not
 * let a root write escape it).
 */
export function writeFileCmd(path: string, confineTo?: string): string[] {
  const confine = confineTo === undefined
    ? ''
    : `r=$(realpath -m -- "$p") || classify "cannot resolve $p"
case $r in ${shellQuote(confineTo)}/*) ;; *) classify "$p: Permission denied (outside ${confineTo})" ;; esac
`;
  const script = `${CLASSIFY}${confine}
[ -d "$p" ] && classify "$p: Is a directory"
[ -e "$p" ] && [ ! -f "$p" ] && classify "$p: not a regular file"
d=$(dirname -- "$p")
err=$(mkdir -p -- "$d" 2>&1) || classify "$err"
err=$(${DD} of="$p" oflag=nonblock 2>&1) || classify "$err"
`;
  return ['bash', '-c', script, 'capybara-write', encodeArg(path)];
}

export function statCmd(path: string): string[] {
  const script = `${CLASSIFY}
out=$(stat -c '%F|%s|%a|%.3Y' -- "$p" 2>&1) || classify "$out"
printf '%s\\n' "$out"
`;
  return ['bash', '-c', script, 'capybara-stat', encodeArg(path)];
}
