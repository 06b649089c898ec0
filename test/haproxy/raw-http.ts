/**
 * Byte-exact HTTP/1.1 over a unix socket, for socket proxy tests: the cases need spellings no HTTP
 * library would send (lower-case methods, chunked bodies beside Content-Length, HTTP/2 prefaces,
 * absolute URIs), and a hijacked exec start needs the raw stream after the 101.
 */
import net from 'node:net';

export interface RawCase {
  method: string;
  path: string;
  headers: Record<string, string | string[]>;
  body: string | null;
  raw?: string;
}

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  /** Set when the server switched protocols (101): the open stream, with any bytes already read. */
  upgraded?: { socket: net.Socket; head: Buffer };
}

/** Serialises a case: Content-Length is added unless the case sets it or asks for chunking. */
export function serialise(c: RawCase): Buffer {
  if (c.raw !== undefined) return Buffer.from(c.raw, 'utf8');
  const names = Object.keys(c.headers).map((h) => h.toLowerCase());
  const lines = [`${c.method} ${c.path} HTTP/1.1`];
  if (!names.includes('host')) lines.push('Host: docker');
  for (const [name, value] of Object.entries(c.headers)) {
    for (const v of Array.isArray(value) ? value : [value]) lines.push(`${name}: ${v}`);
  }
  const chunked = names.includes('transfer-encoding');
  let body = Buffer.alloc(0);
  if (c.body !== null) {
    const raw = Buffer.from(c.body, 'utf8');
    if (chunked) {
      body = Buffer.concat([Buffer.from(`${raw.length.toString(16)}\r\n`), raw, Buffer.from('\r\n0\r\n\r\n')]);
    } else {
      body = raw;
      if (!names.includes('content-length')) lines.push(`Content-Length: ${raw.length}`);
    }
  }
  if (!names.includes('connection')) lines.push('Connection: close');
  return Buffer.concat([Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1'), body]);
}

/** Sends one request and reads the response (to the end of the connection, or up to a 101). */
export function send(socketPath: string, c: RawCase, timeoutMs = 20_000): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath);
    let buf = Buffer.alloc(0);
    let head: { status: number; headers: Record<string, string>; end: number } | null = null;
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete response within ${timeoutMs}ms for ${c.method} ${c.path}`));
    }, timeoutMs);
    const finish = (r: RawResponse) => { clearTimeout(timer); resolve(r); };
    socket.on('connect', () => socket.write(serialise(c)));
    socket.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (head) {
        const length = Number(head.headers['content-length'] ?? NaN);
        if (Number.isFinite(length) && buf.length - head.end >= length) {
          socket.destroy();
          finish({ status: head.status, headers: head.headers, body: buf.subarray(head.end, head.end + length) });
        }
        return;
      }
      {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        head = parseHead(buf.subarray(0, end).toString('latin1'), end + 4);
        const length = Number(head.headers['content-length'] ?? NaN);
        if (head.status !== 101 && Number.isFinite(length) && buf.length - head.end >= length) {
          // Complete: do not wait for the server to close a kept-alive connection.
          socket.destroy();
          finish({ status: head.status, headers: head.headers, body: buf.subarray(head.end, head.end + length) });
          return;
        }
        if (head.status === 101) {
          socket.removeAllListeners('data');
          socket.removeAllListeners('end');
          finish({ status: 101, headers: head.headers, body: Buffer.alloc(0),
            upgraded: { socket, head: buf.subarray(head.end) } });
        }
      }
    });
    socket.on('end', () => {
      if (!head) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) { finish({ status: 0, headers: {}, body: buf }); return; }
        head = parseHead(buf.subarray(0, end).toString('latin1'), end + 4);
      }
      let body: Buffer = buf.subarray(head.end);
      if (head.headers['transfer-encoding'] === 'chunked') body = dechunk(body);
      finish({ status: head.status, headers: head.headers, body });
    });
    socket.on('error', (err) => {
      // A server that closes early (e.g. on an HTTP/2 preface) counts as a refusal by the caller.
      clearTimeout(timer);
      if (head) resolve({ status: head.status, headers: head.headers, body: buf.subarray(head.end) });
      else resolve({ status: 0, headers: { 'x-raw-error': err.message }, body: buf });
    });
  });
}

function parseHead(text: string, end: number) {
  const [statusLine = '', ...rest] = text.split('\r\n');
  const status = Number(statusLine.split(' ')[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of rest) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  return { status, headers, end };
}

function dechunk(b: Buffer): Buffer {
  const parts: Buffer[] = [];
  let i = 0;
  while (i < b.length) {
    const eol = b.indexOf('\r\n', i);
    if (eol < 0) break;
    const size = parseInt(b.subarray(i, eol).toString('latin1'), 16);
    if (!size) break;
    parts.push(b.subarray(eol + 2, eol + 2 + size));
    i = eol + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

/**
 * Reads Docker's multiplexed exec stream (8-byte frame headers: stream 1 stdout, 2 stderr) until
 * the stream ends, optionally writing stdin first and half-closing it.
 */
export function readExecStream(up: { socket: net.Socket; head: Buffer }, stdin?: Buffer, timeoutMs = 20_000):
  Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    let buf = up.head;
    const timer = setTimeout(() => { up.socket.destroy(); reject(new Error('exec stream did not end')); }, timeoutMs);
    up.socket.on('data', (chunk: Buffer) => { buf = Buffer.concat([buf, chunk]); });
    up.socket.on('end', () => {
      clearTimeout(timer);
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      let i = 0;
      while (i + 8 <= buf.length) {
        const type = buf[i];
        const size = buf.readUInt32BE(i + 4);
        const payload = buf.subarray(i + 8, i + 8 + size);
        (type === 2 ? err : out).push(payload);
        i += 8 + size;
      }
      up.socket.destroy();
      resolve({ stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
    });
    up.socket.on('error', (e) => { clearTimeout(timer); reject(e); });
    // Half-close only when there is stdin to end: the command then sees EOF, its output still flows.
    if (stdin) up.socket.end(stdin);
  });
}
