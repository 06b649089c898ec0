/** Sends raw bytes to a server on loopback and reads what comes back, for proxy tests. */
import net from 'node:net';

export interface RawResponse {
  readonly status: number;
  readonly reason: string | undefined;
  readonly head: string;
  readonly body: string;
  /** The socket, still open when the proxy kept it (a CONNECT tunnel). */
  readonly socket: net.Socket;
}

/** Writes `request`, waits for a complete response head (and a Content-Length body). */
export function rawRequest(port: number, request: string | Buffer, host = '127.0.0.1', timeoutMs = 5_000, localAddress?: string): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port, allowHalfOpen: true, localAddress });
    let data = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete response within ${timeoutMs} ms; got ${JSON.stringify(data.toString('latin1'))}`));
    }, timeoutMs);
    const tryParse = (ended: boolean): void => {
      const text = data.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      if (end === -1) {
        if (ended) {
          clearTimeout(timer);
          resolve({ status: 0, reason: undefined, head: text, body: '', socket });
        }
        return;
      }
      const head = text.slice(0, end);
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? 0);
      const reason = /^x-egress-reason: *(.*)$/im.exec(head)?.[1]?.trim();
      const length = Number(/^content-length: *(\d+)$/im.exec(head)?.[1] ?? 0);
      const body = text.slice(end + 4);
      if (body.length < length && !ended) return;
      clearTimeout(timer);
      socket.removeAllListeners('data');
      socket.pause();
      resolve({ status, reason, head, body, socket });
    };
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      tryParse(false);
    });
    socket.on('end', () => tryParse(true));
    socket.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    socket.write(request);
  });
}

/** Reads from a socket until it ends or `until` is seen. */
export function readUntil(socket: net.Socket, until: string | undefined, timeoutMs = 5_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const done = (): void => {
      clearTimeout(timer);
      socket.removeAllListeners('data');
      resolve(text);
    };
    const timer = setTimeout(() => reject(new Error(`timed out; got ${JSON.stringify(text)}`)), timeoutMs);
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (until !== undefined && text.includes(until)) done();
    });
    socket.once('end', done);
    socket.once('close', done);
    socket.resume();
  });
}
