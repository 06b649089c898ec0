/**
 * fd-budget.ts without sockets: the open-file limit read from /proc, and the caps it holds. The
 * CLI applying them is test/proxy/cli.test.ts.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { MIN_OPEN_FILES, minOpenFiles, openFilesFor, planDescriptors, softOpenFileLimit } from '../../proxy/budget/fd-budget.js';
import { MAX_LOOKUPS_IN_FLIGHT } from '../../proxy/budget/limits.js';

t.test('the soft open-file limit is read from /proc/<pid>/limits', async (t) => {
  const text = [
    'Limit                     Soft Limit           Hard Limit           Units     ',
    'Max processes             95000                95000                processes ',
    'Max open files            20000                32768                files     ',
  ].join('\n');
  t.equal(softOpenFileLimit(text), 20_000, 'the soft column, not the hard one');
  t.equal(softOpenFileLimit(text.replace('20000 ', 'unlimited ')), undefined, 'unlimited: nothing to fit');
  t.equal(softOpenFileLimit('Max processes 1 1 processes'), undefined, 'no line: nothing to fit');
  t.type(softOpenFileLimit(readFileSync('/proc/self/limits', 'utf8')), 'number', 'this machine\'s own file parses');
});

t.test('a limit that holds the caps asked for keeps them', async (t) => {
  t.equal(openFilesFor(1_000) - openFilesFor(999), 2, 'two descriptors per connection');
  t.ok(openFilesFor(0) >= 2 * MAX_LOOKUPS_IN_FLIGHT, 'two per lookup a flood can hold');
  for (const n of [1, 5, 16_384]) t.same(planDescriptors(openFilesFor(n), n), { maxConnections: n, maxLookupsInFlight: MAX_LOOKUPS_IN_FLIGHT });
});

t.test('a smaller limit lowers both caps so that together they fit', async (t) => {
  for (const nofile of [MIN_OPEN_FILES, MIN_OPEN_FILES + 16, 1_024, 4_096, 20_000, openFilesFor(16_384) - 1]) {
    const plan = planDescriptors(nofile, 16_384);
    if (plan === undefined) {
      t.fail(`no plan for ${nofile}`);
      continue;
    }
    const used = 2 * plan.maxConnections + 2 * plan.maxLookupsInFlight + (openFilesFor(0) - 2 * MAX_LOOKUPS_IN_FLIGHT);
    t.ok(used <= nofile, `${nofile}: ${plan.maxConnections} connections and ${plan.maxLookupsInFlight} lookups use ${used}`);
    t.ok(plan.maxConnections >= 1 && plan.maxConnections < 16_384 && plan.maxLookupsInFlight >= 1 && plan.maxLookupsInFlight <= MAX_LOOKUPS_IN_FLIGHT);
  }
  t.same(planDescriptors(1_024, 16_384), { maxConnections: 192, maxLookupsInFlight: 192 }, 'the common default of 1024');
  t.same(planDescriptors(20_000, 16_384), { maxConnections: 8_848, maxLookupsInFlight: MAX_LOOKUPS_IN_FLIGHT }, 'lookups keep their cap while a quarter holds it');
  t.equal(planDescriptors(MIN_OPEN_FILES - 1, 16_384), undefined, 'below the minimum nothing fits');
});

t.test('descriptors reserved for other connections (the DNS responder\'s TCP cap) come off the top', async (t) => {
  t.equal(openFilesFor(100, 256) - openFilesFor(100), 256);
  t.equal(minOpenFiles(256), MIN_OPEN_FILES + 256);
  t.same(planDescriptors(openFilesFor(16_384, 256), 16_384, 256), { maxConnections: 16_384, maxLookupsInFlight: MAX_LOOKUPS_IN_FLIGHT }, 'a limit that holds all of it keeps the caps');
  for (const nofile of [minOpenFiles(256), 1_024, 4_096, openFilesFor(16_384, 256) - 1]) {
    const plan = planDescriptors(nofile, 16_384, 256);
    if (plan === undefined) {
      t.fail(`no plan for ${nofile}`);
      continue;
    }
    const used = 2 * plan.maxConnections + 2 * plan.maxLookupsInFlight + (openFilesFor(0) - 2 * MAX_LOOKUPS_IN_FLIGHT) + 256;
    t.ok(used <= nofile, `${nofile}: ${plan.maxConnections} connections, ${plan.maxLookupsInFlight} lookups and 256 reserved use ${used}`);
  }
  t.same(planDescriptors(1_024, 16_384, 256), { maxConnections: 128, maxLookupsInFlight: 128 }, 'the common default of 1024, in transparent mode');
  t.equal(planDescriptors(minOpenFiles(256) - 1, 16_384, 256), undefined, 'below the minimum nothing fits');
});
