/**
 * `logs` of a sandbox on a shard of the shared egress: the shard's log holds every sandbox's lines,
 * so only the proxy's own JSON records (stdout, each value escaped by pino) that name the sandbox
 * are shown. Its stderr holds raw text (a fatal error's stack quotes messages with their line
 * breaks, proxy/exit.ts), where a co-tenant's text could be made to look like a record naming
 * another sandbox: it is not read for a shard, as run --report does not read it either.
 */
import t from 'tap';
import { DecisionPrinter } from '../../../controller/operator/logs-command.js';

const line = (sandbox: string, host: string): string => `${JSON.stringify({ event: 'decision', decision: 'deny', reason: 'host_not_allowed', host, sandbox })}\n`;

t.test('a shard\'s records of other sandboxes, and anything on its stderr, are not shown', async (t) => {
  const out: string[] = [];
  const printer = new DecisionPrinter({ follow: false, denied: false, json: true }, (text) => void out.push(text), 'cap-victim');
  printer.push('stdout', Buffer.from(line('cap-victim', 'mine.example')));
  printer.push('stdout', Buffer.from(line('cap-other', 'theirs.example')));
  // What a raw stderr line of the shard could look like: a record naming the victim.
  printer.push('stderr', Buffer.from(`capybara-egress: fatal: Error: x\n${line('cap-victim', 'forged.example')}`));
  printer.flush();
  t.equal(out.length, 1, 'one line shown');
  t.match(out[0], /mine\.example/);
  t.notMatch(out.join(''), /forged|theirs/);
});

t.test('a proxy of the sandbox\'s own: both streams, as before', async (t) => {
  const out: string[] = [];
  const printer = new DecisionPrinter({ follow: false, denied: false, json: true }, (text) => void out.push(text));
  printer.push('stderr', Buffer.from(line('x', 'a.example')));
  printer.flush();
  t.equal(out.length, 1);
});
