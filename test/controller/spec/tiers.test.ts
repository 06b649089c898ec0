/**
 * The tier table (controller/spec/tiers.ts) is the one place a tier's meaning is written: these
 * rows are the product's promise per tier (SPEC: none has no network, internal its own network
 * with no route out, allowlist that network plus its own proxy, open the shared bridge and only
 * when the deployment allows it), and a label the controller did not write means nothing to rebuild.
 */
import t from 'tap';
import { TIERS, meaningOfLabel, usesSharedNetwork } from '../../../controller/spec/tiers.js';
import { EGRESS_TIER_NAMES } from '../../../controller/spec/sandbox-spec.js';

t.test('one row per tier of the schema, each saying what the tier has', async (t) => {
  t.same(Object.keys(TIERS).sort(), [...EGRESS_TIER_NAMES].sort());
  const rows = [
    { tier: 'none', sandboxNetwork: 'none', egressProxy: false, shared: false, gated: false },
    { tier: 'internal', sandboxNetwork: 'internal', egressProxy: false, shared: false, gated: false },
    { tier: 'allowlist', sandboxNetwork: 'internal', egressProxy: true, shared: true, gated: false },
    { tier: 'open', sandboxNetwork: 'shared', egressProxy: false, shared: true, gated: true },
  ] as const;
  for (const row of rows) {
    const meaning = TIERS[row.tier];
    t.equal(meaning.sandboxNetwork, row.sandboxNetwork, `${row.tier}: the sandbox's network`);
    t.equal(meaning.egressProxy, row.egressProxy, `${row.tier}: an egress proxy of its own`);
    t.equal(usesSharedNetwork(meaning), row.shared, `${row.tier}: on the shared network`);
    t.equal(meaning.needsAllowOpenEgress, row.gated, `${row.tier}: needs allowOpenEgress`);
  }
});

t.test('a recorded label means its row; a foreign or missing one means none', async (t) => {
  t.equal(meaningOfLabel('allowlist'), TIERS.allowlist);
  for (const label of [undefined, '', 'Allowlist', 'toString', '__proto__', 'constructor']) {
    t.equal(meaningOfLabel(label), TIERS.none, JSON.stringify(label));
  }
});
