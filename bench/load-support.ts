/**
 * What the two load benchmarks (load-tunnels.ts, memory-load.ts) share: a free loopback port, the
 * first line a child prints (its ports), and a percentile of samples.
 */
import type { ChildProcess } from 'node:child_process';
import net from 'node:net';

export function percentile(samples: readonly number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

export async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address() as net.AddressInfo;
  await new Promise((resolve) => s.close(resolve));
  return port;
}

export async function lineFrom(child: ChildProcess): Promise<string> {
  let text = '';
  for await (const chunk of child.stdout!) {
    text += String(chunk);
    if (text.includes('\n')) return text.trim();
  }
  throw new Error('child ended before printing its ports');
}
