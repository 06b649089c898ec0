/**
 * What a listening server does with an accept that failed (no descriptor left: EMFILE, ENFILE;
 * or an error the kernel reports for a pending connection): that one connection is lost, never
 * the process. A net.Server without an 'error' listener turns such an accept into an uncaught
 * exception, which ends every client's egress. Every listener the proxy keeps (its port, the
 * metrics listener, the transparent TLS and HTTP listeners, each DNS responder's TCP side) gets
 * this listener once it listens.
 */
import type net from 'node:net';
import { F, type Logger } from './log.js';

/** Consecutive accept failures are logged once a second at most (a descriptor shortage repeats on every accept). */
const ACCEPT_ERROR_LOG_MS = 1_000;

/** The 'error' listener of a listening server: counts and logs (at most once a second) failed accepts. */
function acceptFailures(log: Logger, listener: string): (err: NodeJS.ErrnoException) => void {
  let failures = 0;
  let loggedAt = 0;
  return (err) => {
    failures += 1;
    const now = Date.now();
    if (now - loggedAt < ACCEPT_ERROR_LOG_MS) return;
    loggedAt = now;
    log.error({ [F.event]: 'accept_failed', [F.error]: err.code ?? err.message, count: failures, listener }, 'a connection could not be accepted; the proxy goes on');
    failures = 0;
  };
}

/** Adds the accept-failure listener to `server`, which listens now; `listener` names it in the log. */
export function handleAcceptFailures(server: net.Server, log: Logger, listener: string): void {
  server.on('error', acceptFailures(log, listener));
}
