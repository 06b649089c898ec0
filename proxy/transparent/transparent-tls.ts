/**
 * A connection on a transparent TLS listener: the client believes it talks to the server, so its
 * first bytes are a ClientHello, and the server name in it is the destination. The hello is read
 * with the strict reader of `tls` tunnels (client-hello.ts), within the hello deadline; then the
 * name goes through the same decision as a CONNECT host (host-name rules, allowlist, port, pinned
 * resolution, address checks) on the port the client dialled, and the tunnel opens as a `tls`
 * tunnel whatever the entry's mode (tunnel.ts: the hello is checked again as it passes, and a
 * TLS 1.3 retry's second hello is held to the same name).
 *
 * A refusal is a TLS alert, since nothing else reaches a TLS client: `access_denied` when the
 * policy refused (the name, the port, the address, the hello), `internal_error` when the network
 * failed (DNS, connect), so that a client can still tell the two apart. Every refusal has its
 * decision line.
 */
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { ClientHelloReader, type HelloResult } from '../tls/index.js';
import type { ClientConnection, ProxyContext } from '../admission/index.js';
import { type DecisionRecorder, F, printable, type Refusal, tlsAlertFor } from '../record/index.js';
import type { Charge } from '../budget/index.js';
import { openTunnel, type TunnelEntry } from '../tunnel/index.js';

/** Ends a transparent TLS connection refused before any tunnel: a TLS alert is all it reads. */
export function refuseTls(connection: ClientConnection, refusal: Refusal): void {
  connection.close(tlsAlertFor(refusal));
}

const TRANSPARENT_ENTRY: TunnelEntry = { established: undefined, refuse: refuseTls, alwaysTls: true };

type HelloRead =
  | { readonly kind: 'hello'; readonly serverName: Buffer | undefined; readonly bytes: Buffer; readonly charged: number }
  | { readonly kind: 'refused'; readonly refusal: Refusal; readonly tls: boolean };

/**
 * Reads the first ClientHello of `client`, held whole (at most what the reader accepts: 32 KiB of
 * hello over at most 64 records, and the rest of the read that completed it), within `timeoutMs`
 * of the call. The bytes are held once, in the reader (each read is copied there and not kept),
 * and what the reader holds is charged to `memory`; `charged` is that charge, which the tunnel
 * takes over. The socket is left paused with nothing read past the returned bytes.
 */
function readHello(client: Socket, timeoutMs: number, memory: Charge): Promise<HelloRead> {
  return new Promise((resolve) => {
    const reader = new ClientHelloReader();
    let charged = 0;
    let timer: NodeJS.Timeout | undefined;
    const finish = (read: HelloRead): void => {
      clearTimeout(timer);
      client.off('data', onData);
      client.off('end', onEnd);
      client.off('close', onEnd);
      client.pause();
      resolve(read);
    };
    const settle = (result: HelloResult): void => {
      if (result.kind === 'incomplete') return;
      if (result.kind === 'refused') {
        // Bytes that are no TLS at all get no alert: the client would not read one.
        finish({ kind: 'refused', refusal: { reason: result.reason, detail: result.detail }, tls: result.reason === 'tls_hello_malformed' });
        return;
      }
      finish({ kind: 'hello', serverName: result.serverName, bytes: reader.bytes(), charged });
    };
    const onData = (chunk: Buffer): void => {
      const result = reader.push(chunk);
      // What the reader holds before the verdict is charged to the memory budget (it stays
      // charged until the tunnel's verdict or the close); past the client's share, refused, and
      // the reader (its bytes) dropped with the connection.
      const more = reader.held - charged;
      if (more > 0) {
        if (!memory.grow(more)) {
          finish({ kind: 'refused', refusal: { reason: 'overloaded', detail: memory.explain(more) }, tls: true });
          return;
        }
        charged += more;
      }
      settle(result);
    };
    const onEnd = (): void => settle(reader.end());
    timer = setTimeout(() => finish({ kind: 'refused', refusal: { reason: 'tls_hello_timeout', detail: 'no complete TLS ClientHello arrived in time' }, tls: true }), timeoutMs);
    client.on('data', onData);
    client.once('end', onEnd);
    client.once('close', onEnd);
    client.resume();
  });
}

/** One connection on the transparent TLS listener for dialled port `port`. */
export async function handleTransparentTls(ctx: ProxyContext, connection: ClientConnection, port: number, record: DecisionRecorder): Promise<void> {
  const started = performance.now();
  const client = connection.socket;
  client.on('error', () => client.destroy()); // reported by the close line; never crashes the process
  const hello = await readHello(client, ctx.limits.helloTimeoutMs, connection.memory);
  if (hello.kind === 'refused') {
    record.deny(hello.refusal, { [F.port]: port });
    connection.close(hello.tls ? tlsAlertFor(hello.refusal) : undefined);
    return;
  }
  if (hello.serverName === undefined) {
    const refusal: Refusal = { reason: 'sni_missing', detail: 'the TLS ClientHello carries no server name: a transparent TLS connection is routed by it', port };
    record.deny(refusal, { [F.port]: port });
    refuseTls(connection, refusal);
    return;
  }
  // The name as sent, bytes and all: the policy's host-name rules refuse what is no host name.
  const host = hello.serverName.toString('latin1');
  record.note({ [F.sni]: printable(hello.serverName) });
  await openTunnel(ctx, connection, { host, port, started, headCharged: hello.charged }, hello.bytes, record, TRANSPARENT_ENTRY);
}
