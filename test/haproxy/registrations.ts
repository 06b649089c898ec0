/**
 * Registrations the controller may send a shared egress proxy, for the tests of the encoder
 * (test/common/tenant-archive.test.ts) and of the socket proxy's check of it (tenant-archive.test.ts,
 * body-fuzz-registration.test.ts): every form of an allowHosts entry, both modes, the narrowest and
 * widest subnets, the vacant form.
 */
import type { SlotFileValue } from '../../common/index.js';

/** 2026-01-01T00:00:00Z: a fixed mtime, so that the bytes are. */
export const MTIME = 1_767_225_600;

/** Valid values, each with a name: every form of an allowHosts entry, both modes, the vacant form. */
export const REGISTRATIONS: ReadonlyArray<{ name: string; slot: string; value: SlotFileValue }> = [
  {
    name: 'the issue\'s example',
    slot: 's0',
    value: { version: 1, sandbox: 'cap-x', lifecycle: 'a1b2c3d4', subnet: '10.200.0.0/28', address: '10.200.0.14', policy: { allowHosts: ['example.com'], connectPorts: [443, 80], mode: 'enforce' } },
  },
  {
    name: 'every entry form, report mode, a /16',
    slot: 'slot_0.a-1',
    value: {
      version: 1, sandbox: 'cap-7F3a.b_C', lifecycle: 'A'.repeat(64), subnet: '172.16.0.0/16', address: '172.16.255.1',
      policy: {
        version: 1,
        allowHosts: ['*.example.org', { host: 'git.example.com', tunnel: 'opaque' }, { host: 'api.example.com', methods: ['GET', 'HEAD'], paths: ['/repos/org/*', '/v1/x:y@z', '/a%2Fb'] }],
        connectPorts: [22, 443],
        mode: 'report',
      },
    },
  },
  {
    name: 'a /30 and no optional policy member',
    slot: '9',
    value: { version: 1, sandbox: '0', lifecycle: '--------', subnet: '192.168.7.4/30', address: '192.168.7.6', policy: { allowHosts: [] } },
  },
  { name: 'vacant', slot: 'a'.repeat(63), value: { version: 1, vacant: true } },
];

/**
 * A ustar archive of one file laid out as common/tenant-archive.ts lays it out, from raw content
 * (the encoder takes only values): `edit` changes the header before its checksum is computed, so
 * that a mutation is refused for its own field, not for the checksum.
 */
export function tarOf(name: string, content: string | Buffer, edit: (header: Buffer) => void = () => undefined): Buffer {
  const body = typeof content === 'string' ? Buffer.from(content, 'utf8') : content;
  const h = Buffer.alloc(512);
  const octal = (n: number, width: number): string => `${n.toString(8).padStart(width - 1, '0')}\0`;
  h.write(name, 0, 'latin1');
  h.write(octal(0o644, 8), 100, 'latin1');
  h.write(octal(0, 8), 108, 'latin1');
  h.write(octal(0, 8), 116, 'latin1');
  h.write(octal(body.length, 12), 124, 'latin1');
  h.write(octal(MTIME, 12), 136, 'latin1');
  h.write('0', 156, 'latin1');
  h.write('ustar\x0000', 257, 'latin1');
  h.write(octal(0, 8), 329, 'latin1');
  h.write(octal(0, 8), 337, 'latin1');
  edit(h);
  h.write(' '.repeat(8), 148, 'latin1');
  const sum = h.reduce((a, b) => a + b, 0);
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
  return Buffer.concat([h, body, Buffer.alloc((512 - (body.length % 512)) % 512 + 1024)]);
}
