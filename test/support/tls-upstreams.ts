/**
 * Real TLS servers on loopback for the tunnel tests: OpenSSL (Node's tls) and Go's crypto/tls
 * (test/proxy/fixtures/tls-upstream.go, built with the go command). Each reports the server name
 * of every handshake it completed and how many bytes reached it, so a test can tell "refused by
 * the proxy" from "refused by the server".
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { toolMissing } from './needs.js';
import { selfSignedCert } from './tls-cert.js';

export interface TlsUpstream {
  readonly name: string;
  readonly port: number;
  /** Server names of the handshakes completed so far. */
  readonly handshakes: string[];
  /** Bytes the server received, over every connection closed so far. */
  bytesReceived(): number;
  /** Connections closed so far. */
  closed(): number;
  close(): Promise<void>;
}

/** `groups`: the key-exchange groups the server accepts (`P-256` alone makes a TLS 1.3 client that offered X25519 get a HelloRetryRequest). */
export async function startOpensslUpstream(groups?: string): Promise<TlsUpstream> {
  const handshakes: string[] = [];
  const sockets = new Set<net.Socket>();
  let closedBytes = 0;
  let closed = 0;
  const server = tls.createServer({ ...selfSignedCert(), ...(groups ? { ecdhCurve: groups } : {}) }, (socket) => {
    const name = (socket as tls.TLSSocket & { servername?: string | false }).servername || '';
    handshakes.push(name);
    socket.end(`openssl ${name}\n`);
  });
  server.on('tlsClientError', () => undefined);
  // Count what arrives on the TCP connection itself, handshake or not.
  const raw = net.createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => {
      closedBytes += socket.bytesRead;
      closed += 1;
      sockets.delete(socket);
    });
    socket.on('error', () => undefined);
    server.emit('connection', socket);
  });
  await new Promise<void>((resolve) => raw.listen(0, '127.0.0.1', resolve));
  return {
    name: 'OpenSSL',
    port: (raw.address() as net.AddressInfo).port,
    handshakes,
    bytesReceived: () => closedBytes,
    closed: () => closed,
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      raw.close(() => resolve());
    }),
  };
}

const goSource = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'proxy', 'fixtures', 'tls-upstream.go');

/** Why the Go upstream cannot run here, or undefined when it can. */
export function goUnavailable(): string | undefined {
  return toolMissing('go', ['version'], 'apt-get install golang-go');
}

export async function startGoUpstream(): Promise<TlsUpstream> {
  const dir = mkdtempSync(path.join(tmpdir(), 'egress-go-'));
  const binary = path.join(dir, 'tls-upstream');
  execFileSync('go', ['build', '-o', binary, goSource], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, GOCACHE: process.env.GOCACHE ?? path.join(tmpdir(), 'egress-go-cache') } });
  const { key, cert } = selfSignedCert();
  writeFileSync(path.join(dir, 'key.pem'), key);
  writeFileSync(path.join(dir, 'cert.pem'), cert);
  const child: ChildProcess = spawn(binary, [path.join(dir, 'cert.pem'), path.join(dir, 'key.pem')], { stdio: ['ignore', 'pipe', 'inherit'] });
  const handshakes: string[] = [];
  let received = 0;
  let closed = 0;
  let output = '';
  const port = await new Promise<number>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the Go upstream exited (${code})`)));
    child.stdout?.on('data', (d: Buffer) => {
      output += d.toString();
      const lines = output.split('\n');
      output = lines.pop() ?? '';
      for (const line of lines) {
        const listening = /^listening (\d+)$/.exec(line);
        if (listening) resolve(Number(listening[1]));
        const done = /^handshake (.*)$/.exec(line);
        if (done) handshakes.push(done[1] ?? '');
        const closedLine = /^closed (\d+)$/.exec(line);
        if (closedLine) {
          received += Number(closedLine[1]);
          closed += 1;
        }
      }
    });
  });
  return {
    name: 'Go crypto/tls',
    port,
    handshakes,
    // Counted when each connection closes.
    bytesReceived: () => received,
    closed: () => closed,
    close: async () => {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
