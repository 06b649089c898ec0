/**
 * Plain-HTTP keep-alive load with wrk (a C load generator: a Node client would be slower than the
 * proxies it measures). Through a proxy, a Lua script sends the absolute-form request target and
 * a Host header that names the same host and port, as a browser configured with a proxy does.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startChild } from './children.js';

export interface WrkTarget {
  /** Where wrk connects: the proxy, or the upstream itself for "direct". */
  readonly connectPort: number;
  /** Through a proxy: the absolute URL to request; direct: undefined (origin-form `/`). */
  readonly absoluteUrl?: string;
}

export interface WrkResult {
  readonly requestsPerSec: number;
  readonly requests: number;
  /** Non-2xx responses plus socket errors: a result with many is not a fair number. */
  readonly failures: number;
  readonly detail: string;
  /** Read errors on about every request: the peer closes after each response (no keep-alive). */
  readonly closesPerRequest: boolean;
}

export interface WrkOptions {
  readonly wrk: string;
  readonly tmp: string;
  readonly connections: number;
  readonly threads: number;
  readonly seconds: number;
}

function luaString(text: string): string {
  return JSON.stringify(text); // a JSON string of ASCII is a valid Lua string literal
}

export async function runWrk(name: string, target: WrkTarget, options: WrkOptions): Promise<WrkResult> {
  const args = ['-c', String(options.connections), '-t', String(options.threads), '-d', `${options.seconds}s`, '--timeout', '2s'];
  if (target.absoluteUrl !== undefined) {
    const url = new URL(target.absoluteUrl);
    const script = join(options.tmp, `wrk-${name}.lua`);
    writeFileSync(
      script,
      [`wrk.method = "GET"`, `wrk.path = ${luaString(url.href)}`, `wrk.headers["Host"] = ${luaString(url.host)}`, ''].join('\n'),
    );
    args.push('-s', script);
  }
  args.push(`http://127.0.0.1:${target.connectPort}/`);
  const child = await startChild(`wrk ${name}`, options.wrk, args, { captureStdout: true, lifetimeSec: options.seconds + 15 });
  const code = await child.exited;
  const out = child.stdout();
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
  if (code !== 0 || !rps) throw new Error(`wrk failed (exit ${String(code)}): ${(child.stderr() || out).trim().slice(-400)}`);
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const socketErrors = sock ? sock.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0;
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
  const readErrors = Number(sock?.[2] ?? 0);
  return {
    requestsPerSec: Number(rps[1]),
    requests,
    failures: non2xx + socketErrors,
    closesPerRequest: non2xx === 0 && requests > 0 && readErrors >= 0.9 * requests,
    detail: [non2xx > 0 ? `${non2xx} non-2xx` : '', sock ? `socket errors ${sock[0].replace('Socket errors: ', '')}` : ''].filter(Boolean).join('; '),
  };
}
