/**
 * The bytes the proxy holds for a client before it has decided what to do with them, counted
 * against a process-wide budget and a per-client share of it (memory-plan.ts sizes both from the
 * memory the process may use). Without it one client could make the proxy buffer until the kernel
 * killed it: 3,000 tunnels each sending a 32 KiB ClientHello left one byte short took ~100 KiB
 * each, and 800 connections each pipelining a body behind a slow request ~150 KiB each, and a
 * 256 MiB cgroup ended the process after ~2,400 tunnels, and with it every other client's egress.
 *
 * Every connection has one Charge. It must be admitted (a floor that fits) before the connection
 * is served, and it grows as the connection makes the proxy hold more: a hello still arriving
 * (exactly what the TlsGuard holds), Node's HTTP parser reading a head, requests waiting their
 * turn. A growth that does not fit is refused, and the caller refuses that connection or request
 * `overloaded`; nothing admitted is ever charged more than it was let hold, so what was admitted
 * keeps working.
 *
 * After the verdict, a tunnel or a forwarded response holds bytes only while one side does not
 * read: the other side is paused (backpressure, not buffering), and what the pause leaves held is
 * charged (`hold`) until the reader drains it. Those bytes are held already, so they are never
 * refused; instead a client past its share has its oldest stalled directions closed: 2,400
 * unread downloads from one client had ended a 256 MiB proxy. Pure accounting: no sockets, no
 * timers.
 */

const KIB = 1024;

/** What every connection is charged from its accept until its first verdict: its first read. */
export const ACCEPT_BYTES = 4 * KIB;

/**
 * What a connection costs while Node's HTTP parser reads it, per byte of the largest head allowed:
 * the parser keeps a head still arriving as strings in JavaScript arrays, and a head of 16 KiB
 * made of ~3,000 tiny fields measured ~150 KiB (with the request's own objects).
 */
const PARSER_BYTES_PER_HEAD_BYTE = 12;

/** The charge of a connection that Node's HTTP parser reads (a head it may be receiving). */
export function parserBytes(maxHeaderBytes: number): number {
  return PARSER_BYTES_PER_HEAD_BYTE * maxHeaderBytes;
}

/**
 * A request whose body must wait for the one before it: Node's parser has already pushed the
 * rest of the read that carried its head into it, and reads once more before it stops (measured
 * ~130 KiB of body and ~25 KiB of objects per connection).
 */
export const BODY_WAIT_BYTES = 160 * KIB;

/** A parsed request's own objects (the message, its response, their state). */
const REQUEST_BYTES = 4 * KIB;
/** Per field of a parsed head: two strings and their slots in two arrays. */
const FIELD_BYTES = 64;

/**
 * What a parsed request holds until its response is done, from its head as Node gave it: its
 * fields as strings (each byte twice: `rawHeaders` and `headers`) and their objects. A pipeline of
 * 32 waiting requests with 16 KiB of tiny fields each measured ~4.5 MiB on one connection.
 */
export function requestBytes(url: string, rawHeaders: readonly string[]): number {
  let bytes = url.length;
  for (const field of rawHeaders) bytes += field.length;
  return REQUEST_BYTES + 2 * bytes + FIELD_BYTES * (rawHeaders.length / 2);
}

/**
 * What a stalled direction of a tunnel or forwarded response may hold beyond what its destination
 * has queued: the paused source's read buffer (up to its 16 KiB high-water mark) and the read
 * that crossed it (libuv reads up to 64 KiB at a time).
 */
export const READ_AHEAD_BYTES = 80 * KIB;

/** Bytes held for a stalled direction, charged until the destination drains (idempotent). */
export interface Held {
  release(): void;
}

const NOT_HELD: Held = { release: () => undefined };

/** One connection's bytes held before a verdict, and while a direction of it is stalled. */
export interface Charge {
  /** Bytes charged now. */
  readonly bytes: number;
  /** Charges `n` more; false (and nothing charged) when that passes the client's share or the budget. */
  grow(n: number): boolean;
  /** Gives back `n` of what was charged. */
  shrink(n: number): void;
  /** Gives back everything (idempotent): the connection closed. */
  release(): void;
  /** Why `wanted` bytes more did not fit, for a refusal's detail. */
  explain(wanted: number): string;
  /**
   * Charges `n` bytes a stalled direction holds already (they cannot be refused) until released.
   * When that puts the client past its share (or the proxy past its budget), the client's oldest
   * stalled directions are closed first: `evict` ends the one it is given for.
   */
  hold(n: number, evict: () => void): Held;
}

export interface MemoryBudgetSize {
  /** Bytes all clients together may make the proxy hold before a verdict. */
  readonly totalBytes: number;
  /** Bytes one client address may make it hold. */
  readonly perClientBytes: number;
}

/** A charge that never refuses: for a connection the server did not accept itself. */
export const UNCHARGED: Charge = { bytes: 0, grow: () => true, shrink: () => undefined, release: () => undefined, explain: () => 'not charged', hold: () => NOT_HELD };

interface Stall {
  readonly bytes: number;
  readonly evict: () => void;
}

export class MemoryBudget {
  private usedBytes = 0;
  private readonly byClient = new Map<string, number>();
  /** Each client's stalled directions, oldest first. */
  private readonly stalls = new Map<string, Set<Stall>>();

  constructor(readonly size: MemoryBudgetSize) {}

  /** Bytes charged now, over all clients. */
  get used(): number {
    return this.usedBytes;
  }

  /** Bytes charged now to `client`. */
  usedBy(client: string): number {
    return this.byClient.get(client) ?? 0;
  }

  /**
   * A new connection from `client`, charged `floor` from the start: undefined when even that
   * does not fit, and the connection must be refused `overloaded`.
   */
  admit(client: string, floor: number): Charge | undefined {
    const charge = this.chargeFor(client);
    return charge.grow(floor) ? charge : undefined;
  }

  /** Stalled directions charged now to `client` (for tests and the bench). */
  stalledBy(client: string): number {
    return this.stalls.get(client)?.size ?? 0;
  }

  /** See Charge.hold. */
  hold(client: string, bytes: number, evict: () => void): Held {
    const stall: Stall = { bytes, evict };
    let mine = this.stalls.get(client);
    if (mine === undefined) {
      mine = new Set();
      this.stalls.set(client, mine);
    }
    mine.add(stall);
    this.add(client, bytes);
    this.enforce(client);
    return { release: () => void this.forget(client, stall) };
  }

  /** Takes `stall` off the books; false when it was not on them (released or evicted already). */
  private forget(client: string, stall: Stall): boolean {
    const mine = this.stalls.get(client);
    if (mine === undefined || !mine.delete(stall)) return false;
    if (mine.size === 0) this.stalls.delete(client);
    this.add(client, -stall.bytes);
    return true;
  }

  /**
   * Closes stalled directions until `client` is within its share, oldest first, and then, while
   * the proxy is past its budget, those of the client holding the most.
   */
  private enforce(client: string): void {
    while (this.usedBy(client) > this.size.perClientBytes && this.evictOldest(client));
    while (this.usedBytes > this.size.totalBytes) {
      const heaviest = this.heaviestStalled();
      if (heaviest === undefined || !this.evictOldest(heaviest)) return;
    }
  }

  private evictOldest(client: string): boolean {
    const oldest = this.stalls.get(client)?.values().next().value;
    if (oldest === undefined || !this.forget(client, oldest)) return false;
    oldest.evict();
    return true;
  }

  /**
   * Why `wanted` more bytes for `client` do not fit, for the refusal's detail, which the client
   * reads: its own share, or that the proxy's budget is full, never how much the other clients
   * hold. A shared proxy's sandbox can drive itself past its share at will, and a count of every
   * client's bytes in each refusal let it watch the other sandboxes' traffic; the operator has
   * that count as a metric.
   */
  explain(client: string, wanted: number): string {
    const kib = (n: number): string => (Number.isFinite(n) ? String(Math.ceil(n / KIB)) : 'unlimited');
    const mine = `${client} holds ${kib(this.usedBy(client))} KiB of its ${kib(this.size.perClientBytes)} KiB share`;
    const why = this.usedBy(client) + wanted > this.size.perClientBytes ? mine : `${mine}, and the proxy's ${kib(this.size.totalBytes)} KiB are held`;
    return `${kib(wanted)} KiB more do not fit: ${why}, in bytes not yet decided on`;
  }

  /**
   * Whether `n` more bytes for `client` fit. Within its share but past the total, stalls of the
   * clients holding the most are closed to make room: bytes held for readers that stopped are the
   * ones given back first, so that clients filling the budget with stalls lock no one else out.
   */
  private fits(client: string, n: number): boolean {
    if (this.usedBy(client) + n > this.size.perClientBytes) return false;
    while (this.usedBytes + n > this.size.totalBytes) {
      const heaviest = this.heaviestStalled(client);
      if (heaviest === undefined || !this.evictOldest(heaviest)) return false;
    }
    return true;
  }

  /** The client with stalls that holds the most, other than `except`. */
  private heaviestStalled(except?: string): string | undefined {
    let heaviest: string | undefined;
    for (const c of this.stalls.keys()) if (c !== except && (heaviest === undefined || this.usedBy(c) > this.usedBy(heaviest))) heaviest = c;
    return heaviest;
  }

  private add(client: string, n: number): void {
    this.usedBytes += n;
    const left = this.usedBy(client) + n;
    if (left === 0) this.byClient.delete(client);
    else this.byClient.set(client, left);
  }

  private chargeFor(client: string): Charge {
    let bytes = 0;
    let released = false;
    const budget = this;
    return {
      get bytes() {
        return bytes;
      },
      grow(n) {
        // A closed connection holds nothing more; whatever still runs for it is not refused.
        if (released) return true;
        if (!budget.fits(client, n)) return false;
        bytes += n;
        budget.add(client, n);
        return true;
      },
      shrink(n) {
        const given = Math.min(n, bytes);
        bytes -= given;
        budget.add(client, -given);
      },
      release() {
        this.shrink(bytes);
        released = true;
      },
      explain: (wanted) => budget.explain(client, wanted),
      hold: (n, evict) => (released ? NOT_HELD : budget.hold(client, n, evict)),
    };
  }
}
