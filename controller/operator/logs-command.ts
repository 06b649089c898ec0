/**
 * `logs NAME [-f] [--denied] [--json]`: a sandbox's egress decisions, read from the log of its
 * egress proxy container through the engine itself (the socket proxy admits no log route, and
 * should not: a container's log is not the controller's to read). Each record is shown by
 * decision-format.ts; a line that is not a JSON record, or is longer than the cap, is counted
 * and said at the end, never shown. With -f it follows until interrupted (exit 0), across a
 * restart or a suspend of the proxy, and ends with an error when the sandbox goes away.
 *
 * A sandbox on a shard of the shared egress has its decisions in the shard's log, among those of
 * every sandbox the shard serves: only the records that name it are shown (each line of a shared
 * proxy's connection or DNS answer names its sandbox), from its container's create on, so a
 * sandbox of the same name before it is not shown either.
 */
import { engineStatus, sinkWait, type DockerEngine, type LogRead, type LogRequest } from '../docker/index.js';
import { LABEL_EGRESS, LABEL_EGRESS_ISOLATION, SandboxError, meaningOfLabel, namesFor } from '../spec/index.js';
import { shardOfLabels } from '../sandbox/index.js';
import { formatRecord, isRefusal, jsonLine, parseLogLine } from './decision-format.js';
import { LineSplitter, MAX_LOG_LINE_BYTES } from './log-lines.js';

export interface LogsOptions {
  readonly follow: boolean;
  /** Refusals only. */
  readonly denied: boolean;
  /** The records as the proxy wrote them (JSON lines), not as text. */
  readonly json: boolean;
}

export interface LogsIo {
  /** Writes `text`; a promise back (a full pipe) holds the log's reading until it settles. */
  readonly stdout: (text: string) => unknown;
  /** A line for the operator, on stderr. */
  readonly note: (line: string) => void;
  /** Calls `handler` on an interrupt (SIGINT) until the returned function is called; -f ends on it. */
  readonly onInterrupt?: ((handler: () => void) => () => void) | undefined;
  /** How often -f looks at a stopped proxy (default 1 s). */
  readonly pollMs?: number | undefined;
}

/**
 * Prints the records of one log as they arrive, and counts the lines it skipped. A write that asks
 * to wait (its reader is slow: `logs -f | less`, paused) is handed back from `push`, and the log's
 * stream is paused until it settles: the engine's connection holds what is not read yet, never
 * this process.
 */
export class DecisionPrinter {
  skipped = 0;
  private waiting: Promise<unknown> | undefined;
  private readonly streams = {
    stdout: new LineSplitter((l) => this.line(l), () => (this.skipped += 1)),
    stderr: new LineSplitter((l) => this.line(l), () => (this.skipped += 1)),
  };

  constructor(
    private readonly options: LogsOptions,
    private readonly stdout: (text: string) => unknown,
    /** A shard's log: the records of this sandbox only. */
    private readonly sandbox?: string,
  ) {}

  /** Prints the lines `chunk` ends; what the output asked to wait for, if it did. */
  readonly push = (stream: 'stdout' | 'stderr', chunk: Buffer): Promise<unknown> | undefined => {
    // A shard's stderr is raw text (a fatal error's stack quotes messages with their line
    // breaks), where a co-tenant's text could pass for a record naming another sandbox: only
    // stdout, pino's records, is read there (as run --report reads its proxy's).
    if (stream === 'stderr' && this.sandbox !== undefined) return undefined;
    this.streams[stream].push(chunk);
    const waiting = this.waiting;
    this.waiting = undefined;
    return waiting;
  };

  flush(): void {
    this.streams.stdout.flush();
    this.streams.stderr.flush();
  }

  private line(text: string): void {
    const parsed = parseLogLine(text);
    if (parsed.kind === 'malformed') this.skipped += 1;
    if (parsed.kind !== 'record') return;
    if (this.sandbox !== undefined && parsed.record.sandbox !== this.sandbox) return;
    if (this.options.denied && !isRefusal(parsed.record)) return;
    const written = this.stdout(`${this.options.json ? jsonLine(text, parsed.record) : formatRecord(parsed.record)}\n`);
    const wait = sinkWait(written);
    if (wait !== undefined) this.waiting = wait;
  }
}

/** A log read; the socket proxy's refusal of it (no log route, by design) says where to run logs instead. */
export async function readLogs(engine: Pick<DockerEngine, 'readLogs'>, egress: string, request: LogRequest): Promise<LogRead> {
  try {
    return await engine.readLogs(egress, request);
  } catch (err) {
    if (engineStatus(err) !== 403) throw err;
    throw new SandboxError(
      'engine_refused',
      'logs (and run --report) read the egress proxy\'s container log, which the socket proxy refuses by design. Run it on the engine host against the engine itself: --endpoint unix:///var/run/docker.sock (or a tcp:// engine with --tls-cert-dir).',
      { cause: err },
    );
  }
}

/**
 * Where sandbox `name`'s decisions are: its egress proxy container, or the shard that serves it
 * (then `only` its own records, `sinceMs` from its create); an error when there is none to read.
 */
async function egressOf(engine: DockerEngine, name: string, sharedNetwork: string): Promise<{ readonly egress: string; readonly only?: string; readonly sinceMs?: number }> {
  const sandbox = await engine.inspectContainer(name);
  if (sandbox === undefined) throw new SandboxError('not_found', `no such sandbox ${name} (capybara-sandbox ls lists them)`);
  const tier = sandbox.labels[LABEL_EGRESS] ?? 'unknown';
  if (!meaningOfLabel(tier).egressProxy) {
    throw new SandboxError('not_found', `sandbox ${name} has egress tier ${tier}, which has no egress proxy: there are no decisions to show`);
  }
  if (sandbox.labels[LABEL_EGRESS_ISOLATION] === 'shared') {
    const shard = shardOfLabels(sandbox.labels, sharedNetwork);
    if (shard === undefined) throw new SandboxError('not_found', `sandbox ${name} is served by the shared egress but does not say which shard; capybara-sandbox doctor checks it`);
    if ((await engine.inspectContainer(shard.name)) === undefined) {
      throw new SandboxError('not_found', `the egress shard ${shard.name} serving sandbox ${name} is missing (its log went with it); the sandbox's next command starts it again. Is --network (the deployment's shared network) right?`);
    }
    return { egress: shard.name, only: name, ...(sandbox.createdMs === undefined ? {} : { sinceMs: sandbox.createdMs }) };
  }
  const egress = namesFor(name).egress;
  if ((await engine.inspectContainer(egress)) === undefined) {
    throw new SandboxError('not_found', `the egress proxy ${egress} of sandbox ${name} is missing (its log went with it); the sandbox's next command starts a new one`);
  }
  return { egress };
}

/** The proxy runs again (since when, by the engine's clock), or the reader stopped. */
type Waited = { readonly startedMs: number | undefined } | 'interrupted';

const REREAD_PAUSE_MS = 250;

const goneError = (name: string): SandboxError => new SandboxError('not_found', `sandbox ${name} went away (destroyed) while its log was followed`);

/**
 * After the proxy's log stream ended (it stopped, or restarted): waits until it runs again,
 * and fails once the sandbox or its proxy is gone.
 */
async function untilRunningAgain(engine: DockerEngine, name: string, egress: string, io: LogsIo, interrupted: () => boolean): Promise<Waited> {
  let said = false;
  for (;;) {
    if (interrupted()) return 'interrupted';
    const [sandbox, proxy] = await Promise.all([engine.inspectContainer(name), engine.inspectContainer(egress)]);
    if (sandbox === undefined) throw goneError(name);
    if (proxy === undefined) throw new SandboxError('not_found', `the egress proxy ${egress} of sandbox ${name} was removed while its log was followed`);
    if (proxy.running) return { startedMs: proxy.startedMs };
    if (!said) io.note(`the egress proxy ${egress} is ${proxy.status} (the sandbox is suspended or stopped); waiting for it to run again (Ctrl-C ends)`);
    said = true;
    await new Promise((resolve) => setTimeout(resolve, io.pollMs ?? 1_000));
  }
}

export async function runLogs(engine: DockerEngine, name: string, sharedNetwork: string, options: LogsOptions, io: LogsIo): Promise<number> {
  const { egress, only, sinceMs: createdMs } = await egressOf(engine, name, sharedNetwork);
  const printer = new DecisionPrinter(options, io.stdout, only);
  const report = (): void => {
    printer.flush();
    if (printer.skipped > 0) io.note(`${printer.skipped} log line(s) skipped: not a JSON record, or longer than ${MAX_LOG_LINE_BYTES / 1024} KiB`);
  };
  if (!options.follow) {
    const read = await readLogs(engine, egress, { follow: false, sinceMs: createdMs, onOutput: printer.push });
    await read.finished;
    report();
    return 0;
  }
  let interrupted = false;
  let current: LogRead | undefined;
  const stopListening = io.onInterrupt?.(() => {
    interrupted = true;
    current?.stop();
  });
  // A shard's log goes on when the sandbox is destroyed: the sandbox itself is looked at, once a
  // poll period, and its end ends the read as a proxy of its own would by going with it.
  let gone = false;
  const watch = only === undefined ? undefined : setInterval(() => {
    engine.inspectContainer(name).then((view) => {
      if (view !== undefined) return;
      gone = true;
      current?.stop();
    }, () => undefined);
  }, io.pollMs ?? 1_000);
  try {
    let sinceMs = createdMs;
    let runStartedMs = (await engine.inspectContainer(egress))?.startedMs;
    while (!interrupted) {
      current = await readLogs(engine, egress, { follow: true, sinceMs, onOutput: printer.push });
      if (interrupted) current.stop();
      await current.finished;
      // Every line up to here was delivered (the stream ends when the proxy stops): a restarted
      // proxy's log is read from its start on, by the engine's clock, which is the one `since` is
      // compared with (this machine's may differ from a remote engine's).
      const endedMs = Date.now();
      printer.flush();
      if (gone) throw goneError(name);
      // At most a few reads a second, should an engine end the stream of a running proxy at once.
      await new Promise((resolve) => setTimeout(resolve, REREAD_PAUSE_MS));
      const waited = await untilRunningAgain(engine, name, egress, io, () => interrupted);
      if (waited === 'interrupted') break;
      // The same run (the engine ended the stream of a running proxy): from where it ended, by
      // this machine's clock, the best there is.
      const restarted = waited.startedMs !== undefined && waited.startedMs !== runStartedMs;
      sinceMs = restarted ? waited.startedMs : endedMs;
      runStartedMs = waited.startedMs;
    }
    report();
    return 0;
  } finally {
    clearInterval(watch);
    stopListening?.();
  }
}
