/**
 * The judge of the socket proxy's network proofs (haproxy/network-proof.lua), run directly under
 * a standalone lua5.4 on answers dockerd could give: a request that names a network by id goes on
 * only when dockerd lists exactly that network and it is a sandbox network ("cap-...") or the
 * shared one. Every other answer refuses: an operator's network, a second network in the answer,
 * an id that only contains the one asked for, a body that is not what dockerd sends, an error.
 * The same proofs against the real HAProxy and engine are in socket-proxy-cases.test.ts.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { needUnmet } from '../support/needs.js';
import { HAPROXY_DIR, luaMissing } from './lua-checker.js';

const HARNESS = fileURLToPath(new URL('./lua/judge-proof.lua', import.meta.url));
const SHARED = 'capybara-sandbox';
const ID = '0123456789abcdef'.repeat(4);
const OTHER = 'fedcba9876543210'.repeat(4);

function judge(rows: ReadonlyArray<{ id: string; status: number; body: string }>): string[] {
  const input = Buffer.concat(rows.flatMap((r) => [Buffer.from(`${r.id} ${r.status} ${Buffer.byteLength(r.body)}\n`), Buffer.from(r.body)]));
  const run = spawnSync('lua5.4', [HARNESS, HAPROXY_DIR, SHARED], { input });
  if (run.status !== 0) throw new Error(run.stderr.toString());
  return run.stdout.toString().split('\n').filter((l) => l !== '');
}

const network = (id: string, name: string, more = ''): string =>
  `{"Name":"${name}","Id":"${id}","Created":"2026-01-01T00:00:00Z","Scope":"local","Driver":"bridge","IPAM":{"Driver":"default","Options":null,"Config":[{"Subnet":"10.213.0.16/28"}]},"Internal":true,"Containers":{},"Options":{},"Labels":{"dev.capybara.sandbox":"1"}${more}}`;

t.test('a network id passes only when dockerd lists exactly that sandbox network', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const rows: Array<{ name: string; id: string; status: number; body: string; verdict: string }> = [
    { name: 'a sandbox network', id: ID, status: 200, body: `[${network(ID, 'cap-x-net')}]`, verdict: 'ok' },
    { name: 'the shared network', id: ID, status: 200, body: `[${network(ID, SHARED)}]`, verdict: 'ok' },
    { name: 'an operator network', id: ID, status: 200, body: `[${network(ID, 'capybara-sandbox_default')}]`, verdict: 'network_not_allowed' },
    { name: 'the host-facing bridge', id: ID, status: 200, body: `[${network(ID, 'bridge')}]`, verdict: 'network_not_allowed' },
    { name: 'a cap name with a dot segment only', id: ID, status: 200, body: `[${network(ID, 'cap-')}]`, verdict: 'network_not_allowed' },
    { name: 'a longer name that starts like the shared one', id: ID, status: 200, body: `[${network(ID, `${SHARED}_default`)}]`, verdict: 'network_not_allowed' },
    { name: 'no such network', id: ID, status: 200, body: '[]', verdict: 'network_not_found' },
    { name: 'only another network (a filter that matched a part of an id)', id: ID, status: 200, body: `[${network(OTHER, 'cap-x-net')}]`, verdict: 'network_not_found' },
    { name: 'the id twice (an answer dockerd never gives)', id: ID, status: 200, body: `[${network(ID, 'cap-x-net')},${network(ID, 'bridge')}]`, verdict: 'network_proof_failed' },
    { name: 'another network beside it', id: ID, status: 200, body: `[${network(OTHER, 'bridge')},${network(ID, 'cap-x-net')}]`, verdict: 'ok' },
    { name: 'a duplicate Name member (the last one is the operator\'s)', id: ID, status: 200, body: `[{"Name":"cap-x-net","Id":"${ID}","Name":"bridge"}]`, verdict: 'network_proof_failed' },
    { name: 'the name as a number', id: ID, status: 200, body: `[{"Name":1,"Id":"${ID}"}]`, verdict: 'network_not_allowed' },
    { name: 'an object, not a list', id: ID, status: 200, body: network(ID, 'cap-x-net'), verdict: 'network_proof_failed' },
    { name: 'not JSON', id: ID, status: 200, body: 'cap-x-net', verdict: 'network_proof_failed' },
    { name: 'trailing bytes', id: ID, status: 200, body: `[${network(ID, 'cap-x-net')}]x`, verdict: 'network_proof_failed' },
    { name: 'dockerd failed', id: ID, status: 500, body: '{"message":"boom"}', verdict: 'network_proof_failed' },
    { name: 'no answer at all', id: ID, status: 0, body: '', verdict: 'network_proof_failed' },
    { name: 'an id prefix', id: ID.slice(0, 12), status: 200, body: `[${network(ID, 'cap-x-net')}]`, verdict: 'network_proof_failed' },
    { name: 'an id in upper case', id: ID.toUpperCase(), status: 200, body: `[${network(ID.toUpperCase(), 'cap-x-net')}]`, verdict: 'network_proof_failed' },
  ];
  const verdicts = judge(rows);
  for (const [i, row] of rows.entries()) t.equal(verdicts[i], row.verdict, row.name);
});
