/**
 * The bash programs the controller runs inside a sandbox. Each is a fixed script plus
 * arguments; everything a caller supplies (command, env, cwd, paths) travels base64-encoded (or,
 * for a command too large for an exec body, on stdin), so exec create bodies stay plain ASCII with
 * no JSON escapes whatever the caller sends.
 *
 * A command runs as uid 1000 and leaves no control state anywhere in the sandbox: Docker starts
 * its exec with `CAPYBARA_EXEC=<tag>/<uuid>` in the environment, which every process of the
 * command inherits, and a kill finds the command's processes by that mark (and the sessions they
 * lead) in /proc, with shell builtins only (a kill must not need to fork when a fork bomb has used
 * up the pids limit). Nothing the command starts with needs a write: a full /tmp or disk cannot
 * stop the wrapper from recording what it never records. Root in the sandbox holds no
 * capabilities, so it cannot switch to uid 1000 (setresuid needs CAP_SETUID): a state only root
 * could read would be one uid 1000 could not write either. `timeout -s KILL` inside the sandbox
 * is the backstop when the controller that started the command is gone.
 */
import { SANDBOX_UID, checkTag } from '../spec/index.js';

export const SANDBOX_USER = `${SANDBOX_UID}:${SANDBOX_UID}`;
export const ROOT_USER = '0:0';
/**
 * The environment variable that marks every process of one command, `<tag>/<uuid>`. Set by the
 * exec create itself, so the first process carries it before it runs a single instruction.
 */
export const EXEC_MARK_VAR = 'CAPYBARA_EXEC';
/** Printed by kill scripts once nothing they were to end is alive; its absence means the kill did not finish. */
export const KILL_OK_MARKER = 'capybara-kill-ok';
/** Seconds the in-sandbox backstop adds to the caller's timeout. */
export const BACKSTOP_GRACE_SECONDS = 5;
/** Inline payloads above this go on stdin before the caller's own (exec bodies are capped at 32 KiB). */
export const MAX_INLINE_PAYLOAD = 24 * 1024;
/**
 * The longest command script (the caller's command with its exports and cd): the script becomes
 * one argument of the command's shell, and Linux refuses an argument of MAX_ARG_STRLEN (32 pages,
 * 131,072 bytes, its NUL included) or more with E2BIG, "Argument list too long".
 */
export const MAX_COMMAND_SCRIPT_BYTES = 131_071;

/**
 * How the commands of one sandbox are kept apart (the deployment's `commandIsolation`).
 * `landlock`: each command starts in a Landlock domain of its own (setpriv), so no process of one
 * command can ptrace another's, read or write its memory (`/proc/PID/mem`, process_vm_*), open its
 * descriptors (`/proc/PID/fd`) or read its environment: the kernel refuses every ptrace access
 * check across domains, and from a domain to the controller's kill scripts, which run outside any
 * (its file scripts run in domains of their own: isolatedFileCmd).
 * The domain restricts nothing else: it handles only the right to link or rename a file across
 * directories (which any domain would otherwise deny), and grants it under `/`. `off`: one trust
 * domain for uid 1000, for debuggers that attach across commands.
 */
export type CommandIsolation = 'landlock' | 'off';
const LANDLOCK_DOMAIN = 'setpriv --landlock-access fs:refer --landlock-rule path-beneath:refer:/';

/**
 * Printed to stderr, with exit code SANDBOX_FULL_EXIT, by every script that found the sandbox at
 * its process limit before starting anything: the command did not run (sandbox-full.ts).
 */
export const SANDBOX_FULL_MARKER = 'capybara-sandbox-full';
export const SANDBOX_FULL_EXIT = 190;
/**
 * Printed to stderr, with exit code WRAPPER_FAILED_EXIT, when the exec wrapper itself failed
 * before the command started (its payload could not be read or decoded).
 */
export const WRAPPER_FAILED_MARKER = 'capybara-exec-failed';
export const WRAPPER_FAILED_EXIT = 191;
/**
 * The first byte written to stderr by the process that becomes the command's shell, once every
 * step of the wrapper went well (the room check, reading the command, the backstop's fork), right
 * before it execs that shell: its presence proves the command began, so the exit status that
 * follows is the command's. Without it the exec is the wrapper's (or Docker's) failure, whatever
 * its exit status says (sandbox-full.ts). The controller removes it before the caller sees stderr.
 */
export const STARTED_BYTE = 0x06;
// A builtin, as an octal escape: no fork, and no byte of the script outside printable ASCII.
const STARTED_PRINTF = `printf '\\${STARTED_BYTE.toString(8).padStart(3, '0')}' >&2`;
/** Free process slots a command needs to start: wrapper, base64 and its subshell, shell. */
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

export function encodeArg(value: string | Uint8Array): string {
  return Buffer.from(value).toString('base64');
}

/** Single-quotes a string for bash; any byte sequence survives. */
export function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

/** The mark of one command (EXEC_MARK_VAR's value). */
export function execMark(tag: string, uuid: string): string {
  return `${checkTag(tag)}/${uuid}`;
}

/** The exec's environment that marks the command. */
export function execMarkEnv(mark: string): string[] {
  return [`${EXEC_MARK_VAR}=${mark}`];
}

/** A command's terminal (ExecOptions.tty): its size, and whether it echoes input. */
export interface TerminalSettings {
  readonly rows?: number | undefined;
  readonly cols?: number | undefined;
  readonly echo: boolean;
}

/**
 * What the command's shell runs: with a terminal its settings (the shell already runs on it),
 * then exports, cd, and the caller's command.
 */
export function commandPayload(command: string, env: Readonly<Record<string, string>>, cwd: string | undefined, tty?: TerminalSettings): string {
  const lines: string[] = [];
  if (tty !== undefined) {
    const size = `${tty.rows === undefined ? '' : ` rows ${tty.rows}`}${tty.cols === undefined ? '' : ` cols ${tty.cols}`}`;
    lines.push(`stty ${tty.echo ? 'echo' : '-echo'}${size} 2>/dev/null`);
  }
  for (const [key, value] of Object.entries(env)) lines.push(`export ${key}=${shellQuote(value)}`);
  if (cwd !== undefined) {
    lines.push(`cd -- ${shellQuote(cwd)} || { echo ${shellQuote(`capybara: cannot change directory to ${cwd}`)} >&2; exit 126; }`);
  }
  lines.push(command);
  return lines.join('\n');
}

/**
 * The bytes a payload too large for an exec body is sent as, on stdin before the caller's own:
 * the script, then an end line naming the command's mark. A stream cut short lacks the end line,
 * and a part of a command must never run as if it were the whole.
 */
export function stagedPayload(script: string, mark: string): Buffer {
  return Buffer.from(`${script}${stagedEnd(mark)}`, 'utf8');
}

function stagedEnd(mark: string): string {
  return `\n# capybara-payload-end ${mark}`;
}

// The backstop's child: prints the start byte, then execs the command's shell in its place (an
// exec needs no new process, so it cannot meet the pids limit; the same argument already passed
// exec once). The command's shell is a plain "bash -c": its $0 and line numbers are the caller's.
const BEGIN = `${STARTED_PRINTF}; exec bash -c "$1"`;
// The same on a terminal of the command's own, which script(1) opens inside the command's
// Landlock domain: the exec itself never has Docker's TTY, so the start byte stays on a pipe that
// no other process can write (a Docker TTY is a /dev/pts device owned by uid 1000, which any
// process of the sandbox user could open and write the byte into). The byte is written by
// script's child, on fd 3 (the exec's stderr pipe, which script passes through untouched, as
// util-linux's does), only once script made the terminal and its fork and login_tty succeeded:
// script failing at the pids limit or without a pty ("script: cannot create child process") is
// a start that failed, judged by sandbox-full.ts, never the command's status. fd 3 is closed
// before the command's shell. -E never: no echo unless the payload's stty turns it on; -e: the
// command's exit status; /dev/null: no typescript. The script is quoted with printf -v for
// script's $SHELL -c.
const TTY_STARTED_PRINTF = `printf '\\${STARTED_BYTE.toString(8).padStart(3, '0')}' >&3`;
const BEGIN_TTY = `exec 3>&2; printf -v q %q "$1"; SHELL=/bin/bash exec script -E never -qec "${TTY_STARTED_PRINTF} || exit 1; exec 3>&-; exec bash -c $q" /dev/null`;

// $1 backstop seconds; $2 the payload: base64, or "-N" for N bytes on stdin (stagedPayload); $3
// the isolation (CommandIsolation); $4 "tty" for a terminal (BEGIN_TTY). Nothing here writes a
// file. Every failure before the start byte is reported with WRAPPER_FAILED_MARKER (or
// SANDBOX_FULL_MARKER, or by bash itself), never as the command's status. The exec is a session of its own (runc starts every exec with setsid),
// which the kill scripts also end.
const WRAPPER = String.raw`${ROOM_CHECK}
fail() { echo "${WRAPPER_FAILED_MARKER}: $1" >&2; exit ${WRAPPER_FAILED_EXIT}; }
case $2 in
  -*)
    script=$(head -c "${'$'}{2#-}" && echo .) || fail "the command could not be read from stdin"
    script=${'$'}{script%.}
    end="${stagedEnd('${' + EXEC_MARK_VAR + '}')}"
    [[ $script == *"$end" ]] || fail "the command arrived incomplete on stdin"
    script=${'$'}{script%"$end"}
    ;;
  *) script=$(printf '%s' "$2" | base64 -d) || fail "the command could not be decoded" ;;
esac
isolate=()
if [ "$3" = landlock ]; then
  # A setpriv that cannot make the domain exits before the start byte, saying why ("setpriv:
  # ..."): the command never runs unisolated.
  isolate=(${LANDLOCK_DOMAIN})
fi
begin=${shellQuote(BEGIN)}
if [ "$4" = tty ]; then
  [[ $(script --help 2>&1) == *--echo* ]] || fail "a command with a terminal (tty) needs script(1) from util-linux 2.35 or later in the image"
  begin=${shellQuote(BEGIN_TTY)}
fi
exec "${'$'}{isolate[@]}" timeout -s KILL "$1" bash -c "$begin" capybara-begin "$script"
`;

export function wrapperCmd(backstopSeconds: number, payload: string, isolation: CommandIsolation, tty = false): string[] {
  return ['bash', '-c', WRAPPER, 'capybara-exec', String(backstopSeconds), payload, isolation, ...(tty ? ['tty'] : [])];
}

// Whether a thread group whose leader is a zombie still runs: its main thread can exit while the
// others go on (pthread_exit), and the leader then reads as a zombie. Sets `task` to a live
// thread's /proc path (the leader's environ is empty once its own thread has gone). A thread's
// state is read from its status file, whose Name line is escaped: its stat file gives the name
// raw, and a thread named "a) Z" and a newline read as a zombie line by line.
const LIVE_TASK = String.raw`
live_task() {
  local t k s
  for t in "$1"/task/[0-9]*; do
    s=
    while read -r k s _; do [ "$k" = State: ] && break; s=; done < "$t/status" 2>/dev/null
    case $s in ''|Z|X) ;; *) task=$t; return 0 ;; esac
  done
  return 1
}
`;

// Kills every live process `chosen` accepts, scanning /proc again until a scan finds none of them
// alive; then prints the OK line (50 scans without that: no line, and the controller restarts the
// container). `chosen` gets the /proc path to read the process's environment from, the pid and
// its session. A zombie (state Z, or X while it goes) whose threads have all ended is over: kill
// succeeds on it, so counting it would rescan /proc for as long as its parent or PID 1 leaves it
// unreaped (50 scans, seconds, after a fork bomb under an init that reaps slowly). One with a
// thread still running is alive, and a kill of its pid ends every thread. A kill of a process of
// another user (root's init) fails for uid 1000, so it does not count either.
const KILL_UNTIL_NONE_ALIVE = String.raw`${LIVE_TASK}
for ((round = 0; round < 50; round++)); do
  alive=0
  for p in /proc/[0-9]*; do
    pid=${'$'}{p#/proc/}
    [ "$pid" = "$$" ] && continue
    # The whole file: the name in "(comm)" is given raw and may hold a newline, and the fields
    # after its last ") " are state ppid pgrp session ...
    line=
    read -r -d '' line < "$p/stat" 2>/dev/null
    [ -n "$line" ] || continue
    read -r -a f <<< "${'$'}{line##*) }"
    task=$p
    case ${'$'}{f[0]} in Z|X) live_task "$p" || continue ;; esac
    chosen "$task" "$pid" "${'$'}{f[3]}" || continue
    kill -KILL "$pid" 2>/dev/null && alive=1
  done
  [ "$alive" = 0 ] && { echo ${KILL_OK_MARKER}; exit 0; }
done
`;

// Chooses every process marked with one of the given marks ($@: "tag/uuid", or "tag/*" for a
// whole tag) and every process of a session a marked process leads (a child that cleared its
// environment but stayed in the command's session). A process that left the session (setsid)
// keeps the mark, so it is found too.
const KILL_MARKED = String.raw`
wanted=("$@")
marked() {
  local e w
  local -a env
  mapfile -d '' -t env < "$1/environ" 2>/dev/null || return 1
  for e in "${'$'}{env[@]}"; do
    [[ $e == ${EXEC_MARK_VAR}=* ]] || continue
    # Unquoted: a pattern ("tag/*"); tags and uuids hold no other glob character.
    for w in "${'$'}{wanted[@]}"; do [[ ${'$'}{e#*=} == $w ]] && return 0; done
  done
  return 1
}
declare -A lead=()
chosen() {
  [ -n "${'$'}{lead[$3]+x}" ] && return 0
  marked "$1" || return 1
  # Only a leader's session: the session of a process that is not one may be shared.
  [ "$3" = "$2" ] && lead[$2]=1
  return 0
}
${KILL_UNTIL_NONE_ALIVE}`;

/** Kills the processes of the given commands: marks from execMark, or `tag/*` patterns. */
export function killMarkedCmd(marks: readonly string[]): string[] {
  return ['bash', '-c', KILL_MARKED, 'capybara-kill', ...marks];
}

export function killTaggedCmd(tags: readonly string[]): string[] {
  return killMarkedCmd(tags.map((tag) => `${checkTag(tag)}/*`));
}

// As uid 1000, `kill -9 -1` reaches every process of the sandbox user and none of root's. Then it
// judges what is left, so that a caller that asked for a clean sandbox (exec `fresh`) gets one or
// a restart.
const KILL_ALL = String.raw`
for round in 1 2 3 4 5 6 7 8 9 10; do kill -KILL -1 2>/dev/null || break; done
chosen() { return 0; }
${KILL_UNTIL_NONE_ALIVE}`;

export function killAllCmd(): string[] {
  return ['bash', '-c', KILL_ALL, 'capybara-killall'];
}

/** The line SURVIVORS prints: the count of live processes not root's, then their pids. */
export const SURVIVORS_MARKER = 'capybara-survivors';

// Run as root, after a kill of everything: lists every live process that is not wholly root's
// (any of its real, effective, saved or file-system uids not 0), by /proc/PID/status, which every
// user may read. Nothing uid 1000 runs can write this exec's output, signal it or trace it, so the
// controller judges the kill by this and never by what the uid-1000 kill script printed (a
// process of the sandbox user can stop that script and write its output).
const SURVIVORS = String.raw`${LIVE_TASK}
n=0 list=
for p in /proc/[0-9]*; do
  pid=${'$'}{p#/proc/}
  [ "$pid" = "$$" ] && continue
  state= uids=
  while read -r k a b c d; do
    case $k in
      State:) state=$a ;;
      Uid:) uids="$a $b $c $d"; break ;;
    esac
  done < "$p/status" 2>/dev/null || continue
  [ -z "$uids" ] || [ "$uids" = "0 0 0 0" ] && continue
  case $state in Z|X) live_task "$p" || continue ;; esac
  n=$((n + 1)) list+=" $pid"
done
echo "${SURVIVORS_MARKER} $n$list"
`;

export function survivorsCmd(): string[] {
  return ['bash', '-c', SURVIVORS, SURVIVORS_MARKER];
}

/** The pids SURVIVORS listed, or undefined when its output is not its line. */
export function parseSurvivors(stdout: string): number[] | undefined {
  const m = new RegExp(`^${SURVIVORS_MARKER} (\\d+)((?: \\d+)*)\n$`).exec(stdout);
  if (m === null) return undefined;
  const pids = (m[2] ?? '').split(' ').filter((x) => x !== '').map(Number);
  return pids.length === Number(m[1]) ? pids : undefined;
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

/**
 * A file script as it is run: with isolation, in a Landlock domain of its own, as a command is.
 * It opens a path the sandbox user may have linked anywhere, and swap between its checks and its
 * open: outside every domain, a link to /proc/PID/fd/1 or /proc/PID/environ of another command
 * would be opened for it, which the kernel refuses that command's own processes (review finding).
 */
export function isolatedFileCmd(cmd: readonly string[], isolation: CommandIsolation): string[] {
  return isolation === 'landlock' ? [...LANDLOCK_DOMAIN.split(' '), ...cmd] : [...cmd];
}

export function statCmd(path: string): string[] {
  const script = `${CLASSIFY}
out=$(stat -c '%F|%s|%a|%.3Y' -- "$p" 2>&1) || classify "$out"
printf '%s\\n' "$out"
`;
  return ['bash', '-c', script, 'capybara-stat', encodeArg(path)];
}
