/**
 * The directory of registrations a shared egress proxy watches: one file per sandbox network slot,
 * `<slot>.json`, put there by the controller through the Docker API (a volume, so a restart of
 * the proxy keeps them). It is read again on every change the kernel reports and every
 * POLL_MS besides, so a change is in force within a second even where no change is reported.
 *
 * A file that cannot be read, parsed or built leaves its slot's previous registration in force,
 * or none for a new slot (fail closed), and its problem is logged once; but one that names another
 * sandbox or lifecycle id than the registration in force is a later registration, and leaves the
 * slot serving nobody. A file that does not say whose it is (its envelope does not parse, as when
 * it is read half written) is taken for an update of the registration in force. A file removed, or
 * made `{"version": 1, "vacant": true}`, ends its slot's registration. A symbolic link and a file
 * over MAX_FILE_BYTES are refused. A scan reads at most MAX_SLOTS files: past that (a shard's
 * volume keeps a vacant file for every subnet it ever served), the slots holding a registration
 * and the files the kernel reported changed first, then the rest in turns.
 */
import { closeSync, constants, fstatSync, openSync, readdirSync, readSync, watch, type FSWatcher } from 'node:fs';
import { join } from 'node:path';
import { parseSlotEnvelope, parseSlotPolicy, PolicyError, type SlotEnvelope } from '../../policy/index.js';
import { F, logLine, type Logger } from '../record/index.js';
import { tenantPolicy, type TenantSettings } from './tenant-policy.js';
import type { Tenant } from './tenant-policy.js';

export const POLL_MS = 500;
export const MAX_FILE_BYTES = 256 * 1024;
export const MAX_SLOTS = 4096;
export const MISSING_GRACE_MS = 150;
const SLOT_FILE = /^([A-Za-z0-9][A-Za-z0-9_.-]{0,126})\.json$/;

interface SlotState {
  /** What the file was when last read: a new one is read again. */
  readonly stamp: string;
  /** The registration in force for the slot (the last good one), if any. */
  readonly tenant: Tenant | undefined;
  /** The problem of the file as it is now, logged once. */
  readonly problem: string | undefined;
  /** When a scan first found the file gone (it ends the registration MISSING_GRACE_MS later). */
  readonly missingSince?: number | undefined;
}

/** A regular file's text and stamp, never through a symbolic link; or why not. */
function readSlot(path: string, known: string | undefined): { stamp: string; text?: string } | { problem: string } {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return { problem: code === 'ELOOP' ? 'a symbolic link, which is never followed' : `cannot be opened (${code ?? String(err)})` };
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return { problem: 'not a regular file' };
    if (st.size > MAX_FILE_BYTES) return { problem: `${st.size} bytes, over ${MAX_FILE_BYTES}` };
    const stamp = `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
    if (stamp === known) return { stamp };
    const buf = Buffer.alloc(st.size);
    let got = 0;
    while (got < buf.length) {
      const n = readSync(fd, buf, got, buf.length - got, got);
      if (n === 0) break;
      got += n;
    }
    return { stamp, text: buf.subarray(0, got).toString('utf8') };
  } catch (err) {
    // A read that fails (EIO on a failing volume) is that file's problem, never the process's.
    return { problem: `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})` };
  } finally {
    closeSync(fd);
  }
}

export class SlotDirectory {
  private readonly slots = new Map<string, SlotState>();
  private watcher: FSWatcher | undefined;
  private timer: NodeJS.Timeout | undefined;
  private pending: NodeJS.Immediate | undefined;
  /** File names the kernel reported changed since the last scan (at most MAX_SLOTS). */
  private readonly noticed = new Set<string>();
  /** Where the next scan past MAX_SLOTS files goes on reading the rest. */
  private turn = 0;
  private directoryProblem: string | undefined;

  constructor(
    readonly dir: string,
    private readonly settings: TenantSettings,
    private readonly log: Logger,
    private readonly onChange: (tenants: Tenant[]) => void,
  ) {}

  /** Reads every registration once (start-up: throws when the directory cannot be read), then watches. */
  start(): Tenant[] {
    const tenants = this.scan(true);
    try {
      this.watcher = watch(this.dir, { persistent: false }, (_event, name) => {
        if (name !== null && this.noticed.size < MAX_SLOTS) this.noticed.add(String(name));
        this.soon();
      });
      this.watcher.on('error', () => undefined);
    } catch {
      // Polling alone still finds every change.
    }
    this.timer = setInterval(() => this.soon(), POLL_MS);
    this.timer.unref();
    return tenants;
  }

  stop(): void {
    this.watcher?.close();
    clearInterval(this.timer);
    if (this.pending !== undefined) clearImmediate(this.pending);
  }

  private soon(): void {
    this.pending ??= setImmediate(() => {
      this.pending = undefined;
      const before = this.current();
      const after = this.scan(false);
      if (after.length !== before.length || after.some((t, i) => t !== before[i])) this.onChange(after);
    });
  }

  private current(): Tenant[] {
    return [...this.slots.values()].flatMap((s) => (s.tenant === undefined ? [] : [s.tenant]));
  }

  /** Reads the directory; the registrations in force after it. */
  scan(first: boolean): Tenant[] {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch (err) {
      if (first) throw new Error(`cannot read the registrations in ${this.dir} (${(err as NodeJS.ErrnoException).code ?? String(err)})`, { cause: err });
      // Gone or unreadable for a moment: every registration stays as it was.
      return this.current();
    }
    const files = names.flatMap((n) => {
      const m = SLOT_FILE.exec(n);
      return m === null ? [] : [[m[1] as string, n] as const];
    });
    files.sort((a, b) => (a[0] < b[0] ? -1 : 1));
    const seen = new Set(files.map(([slot]) => slot));
    for (const [slot, name] of this.toRead(files)) {
      const state = this.slots.get(slot);
      if (state?.missingSince !== undefined) this.slots.set(slot, { ...state, missingSince: undefined });
      this.readOne(slot, join(this.dir, name));
    }
    // Docker's archive extraction removes a file, then creates it again: a file missing from one
    // scan ends its registration only once it is still missing MISSING_GRACE_MS later.
    const now = Date.now();
    for (const [slot, state] of [...this.slots]) {
      if (seen.has(slot)) continue;
      if (state.missingSince === undefined) {
        this.slots.set(slot, { ...state, missingSince: now });
        setTimeout(() => this.soon(), MISSING_GRACE_MS).unref();
      } else if (now - state.missingSince >= MISSING_GRACE_MS) this.slots.delete(slot);
    }
    return this.current();
  }

  /**
   * The files a scan reads: all of them up to MAX_SLOTS. Past it, the slots holding a registration
   * (a change to one must end or change it at once), then the files the kernel reported, then the
   * rest from where the last scan stopped, so that every file is read within a few scans. Reading
   * only the first MAX_SLOTS by name ended the registration of a slot that sorted after them, and
   * never served a later one there; a file not read in a scan keeps its slot as it was.
   */
  private toRead(files: ReadonlyArray<readonly [string, string]>): ReadonlyArray<readonly [string, string]> {
    const noticed = new Set(this.noticed);
    this.noticed.clear();
    if (files.length <= MAX_SLOTS) return files;
    // Logged when the count changes, not at every scan.
    const detail = `${files.length} registrations, over ${MAX_SLOTS}: a scan reads the ${MAX_SLOTS} registered or changed first, the rest in turns`;
    if (detail !== this.directoryProblem) this.problem('(directory)', detail, undefined);
    this.directoryProblem = detail;
    const first = files.filter(([slot, name]) => this.slots.get(slot)?.tenant !== undefined || noticed.has(name)).slice(0, MAX_SLOTS);
    const rest = files.filter(([slot, name]) => this.slots.get(slot)?.tenant === undefined && !noticed.has(name));
    const room = MAX_SLOTS - first.length;
    const from = this.turn % Math.max(1, rest.length);
    this.turn = from + room;
    return [...first, ...rest.slice(from, from + room), ...rest.slice(0, Math.max(0, from + room - rest.length))];
  }

  private readOne(slot: string, path: string): void {
    const was = this.slots.get(slot);
    const read = readSlot(path, was?.stamp);
    if ('problem' in read) return this.problem(slot, read.problem, was);
    if (read.text === undefined) return;
    let envelope: SlotEnvelope | undefined;
    try {
      envelope = parseSlotEnvelope(read.text, path);
      const file = parseSlotPolicy(envelope, path);
      const tenant = file.vacant ? undefined : { slot, sandbox: file.sandbox, lifecycle: file.lifecycle, subnet: file.subnet, address: file.address, policy: tenantPolicy(file.policy, this.settings, path, file.sandbox) };
      this.slots.set(slot, { stamp: read.stamp, tenant, problem: undefined });
      logLine(this.log, { [F.event]: 'tenant_registered', slot, ...(tenant ? { [F.sandbox]: tenant.sandbox, subnet: tenant.subnet.text, lifecycle: tenant.lifecycle, allowHosts: tenant.policy.allowHosts.length } : { vacant: true }) });
    } catch (err) {
      const detail = err instanceof PolicyError ? err.message : `cannot be read: ${(err as Error).message}`;
      this.problem(slot, detail, was, read.stamp, envelope?.vacant === false ? envelope : undefined);
    }
  }

  /**
   * Logs a slot's problem once. A bad update of the registration in force leaves it in force; a
   * file that names another sandbox or lifecycle id (`names`) is a later registration, and fails
   * closed: the slot serves nobody, so the earlier sandbox's connections are closed as on any new
   * registration, and the later sandbox is never served under the earlier one's policy.
   */
  private problem(slot: string, detail: string, was: SlotState | undefined, stamp = was?.stamp ?? '', names?: { sandbox: string; lifecycle: string }): void {
    let tenant = was?.tenant;
    let kept = tenant === undefined ? 'the slot serves nobody' : `sandbox ${tenant.sandbox} keeps its previous policy`;
    if (tenant !== undefined && names !== undefined && (names.sandbox !== tenant.sandbox || names.lifecycle !== tenant.lifecycle)) {
      kept = `it registers sandbox ${names.sandbox} (lifecycle ${names.lifecycle}) in place of ${tenant.sandbox} (lifecycle ${tenant.lifecycle}), so the slot serves nobody`;
      tenant = undefined;
    }
    if (was?.problem !== detail || tenant !== was?.tenant) logLine(this.log, { [F.event]: 'tenant_refused', slot, [F.detail]: `${detail}; ${kept}` }, 'warn');
    if (slot !== '(directory)') this.slots.set(slot, { stamp, tenant, problem: detail });
  }
}
