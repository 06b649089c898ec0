/**
 * Live allowlists (controller/sandbox/allowlist-change.ts) on the in-memory engine: a change
 * rewrites the egress proxy's registration with the same lifecycle id; a bad change, a sandbox
 * without a proxy, one whose policy is its proxy's environment and a missing one change nothing
 * and say why; a proxy rebuilt by recovery keeps the changed list. The real proxy taking the
 * change, and closing what it no longer allows, is docker-live-allowlist.test.ts.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isSandboxError } from '../../../controller/index.js';
import { changedList, deniedButAllowed } from '../../../controller/sandbox/allowlist-change.js';
import { IMAGES } from '../../../common/index.js';
import { fakeSandbox } from '../../support/fake-sandbox.js';

const NAME = 'cap-live';
const spec = (egress: 'allowlist' | 'internal' = 'allowlist') => ({ id: 'live', image: IMAGES.sandbox, limits: { egress, ...(egress === 'allowlist' ? { allowHosts: ['deb.debian.org', 'pypi.org'] } : {}) } });

t.test('the list after a change: the old order, new entries after, dropped ones gone, each once', async (t) => {
  t.same(changedList(['a.test', 'b.test'], { allow: ['c.test', 'a.test', 'c.test'] }), ['a.test', 'b.test', 'c.test']);
  t.same(changedList(['a.test', 'b.test'], { deny: ['a.test', 'z.test'] }), ['b.test']);
  t.same(changedList(['a.test'], { deny: ['a.test'] }), [], 'everything dropped: nothing is reached');
});

t.test('a deny that an entry left in the list still allows whole is named, never taken as done', async (t) => {
  t.same(deniedButAllowed(['*.example.com'], ['a.example.com']), [{ denied: 'a.example.com', by: '*.example.com' }], 'a name under a wildcard');
  t.same(deniedButAllowed(['*.example.com'], ['*.a.example.com']), [{ denied: '*.a.example.com', by: '*.example.com' }], 'a deeper wildcard under a wildcard');
  t.same(deniedButAllowed(['*.Example.com'], ['A.example.com']), [{ denied: 'A.example.com', by: '*.Example.com' }], 'in any case');
  t.same(deniedButAllowed(['api.example.com', '*.a.example.com'], ['*.example.com']), [], 'names allowed one by one under a denied wildcard are kept');
  t.same(deniedButAllowed(['*.example.com'], ['example.com', 'z.test']), [], 'the wildcard does not allow its parent; a name nothing allows');
  t.same(deniedButAllowed(['*.example.com'], ['*.example.com']), [{ denied: '*.example.com', by: '*.example.com' }], 'a wildcard still in the list');
});

t.test('a deny of a name a wildcard entry allows is refused, the list unchanged', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ ...spec(), limits: { egress: 'allowlist' as const, allowHosts: ['*.npmjs.org', 'pypi.org'] } });
  const err = await s.provider.changeAllowHosts(h, { deny: ['registry.npmjs.org', 'pypi.org'] }).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'invalid_spec'), String(err));
  t.match((err as Error).message, /registry\.npmjs\.org would still be allowed by the entry \*\.npmjs\.org.*Deny that entry/);
  t.same(s.engine.registration(NAME)?.policy.allowHosts, ['*.npmjs.org', 'pypi.org'], 'nothing changed, pypi.org included');
  t.same(await s.provider.changeAllowHosts(h, { deny: ['*.npmjs.org'] }), ['pypi.org'], 'denying the wildcard itself drops it');
});

t.test('allow and deny rewrite the registration, the lifecycle id kept', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create(spec());
  const before = s.engine.registration(NAME);
  t.same(before?.policy.allowHosts, ['deb.debian.org', 'pypi.org'], 'registered at create');
  t.same(await s.provider.changeAllowHosts(h, { allow: ['files.pythonhosted.org', '*.npmjs.org'] }), ['deb.debian.org', 'pypi.org', 'files.pythonhosted.org', '*.npmjs.org']);
  t.same(await s.provider.changeAllowHosts(h, { deny: ['pypi.org'] }), ['deb.debian.org', 'files.pythonhosted.org', '*.npmjs.org']);
  const after = s.engine.registration(NAME);
  t.same(after?.policy.allowHosts, ['deb.debian.org', 'files.pythonhosted.org', '*.npmjs.org']);
  t.equal(after?.lifecycle, before?.lifecycle, 'the same sandbox: its connections are rechecked, not all closed');
  t.same([after?.subnet, after?.address], [before?.subnet, before?.address]);
});

t.test('a registration the controller did not write (rules, other ports) is left as it is, and the change says why', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create(spec());
  const held = s.engine.registration(NAME);
  if (held === undefined) return t.fail('registered at create');
  // Written by someone else through the same volume: an entry limited to GET, and port 8443.
  for (const [policy, why] of [
    [{ allowHosts: [{ host: 'deb.debian.org', methods: ['GET'] }, 'pypi.org'] }, /the entry deb\.debian\.org carries rules/],
    [{ allowHosts: ['deb.debian.org'], connectPorts: [8443] }, /its ports are 8443, not the default ones/],
  ] as const) {
    const text = JSON.stringify({ ...held, version: 1, sandbox: NAME, policy });
    const files = [...s.engine.volumeFiles.values()].find((f) => f.has('sandbox.json'));
    files?.set('sandbox.json', Buffer.from(text));
    const err = await s.provider.changeAllowHosts(h, { allow: ['files.pythonhosted.org'] }).then(() => undefined, (e: unknown) => e);
    t.ok(isSandboxError(err) && err.code === 'allowlist_fixed', 'refused as a list the controller cannot change');
    t.match((err as Error).message, why);
    t.equal(files?.get('sandbox.json')?.toString('utf8'), text, 'the registration is untouched: a change would have dropped its rules');
  }
});

t.test('a proxy of its own gets its registration once it runs, before its leg on the sandbox network, and the create waits for it', async (t) => {
  const s = fakeSandbox();
  const probes: string[] = [];
  s.engine.onExec = (container, request) => {
    if (request.cmd.join('\n').includes('/dev/tcp/')) probes.push(request.cmd.join('\n'));
    return s.engine.defaultExec(container, request);
  };
  await s.provider.create(spec());
  const egress = `${NAME}-egress`;
  const network = s.engine.networkNamed(`${NAME}-net`)?.id;
  const calls = s.engine.calls.filter((c) => c.target === egress).map((c) => c.method);
  t.same(calls.filter((m) => ['createContainer', 'startContainer', 'putRegistration', 'connectNetwork'].includes(m)), ['createContainer', 'startContainer', 'putRegistration', 'connectNetwork'], 'written while the proxy loads, before the sandbox can reach it');
  t.ok(network !== undefined && s.engine.containers.get(egress)?.attached.some((a) => a.id === network), 'the leg is on the sandbox network');
  const lifecycle = s.engine.registration(NAME)?.lifecycle ?? 'none';
  t.equal(probes.length, 1, 'one probe');
  t.match(probes[0] ?? '', `lifecycle=${lifecycle}`, 'the probe waits until the proxy names this registration');
});

t.test('a bad change changes nothing and names the entry', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create(spec());
  const rows: Array<[unknown, RegExp, string]> = [
    [{ allow: ['*.com'] }, /\*\.com/, 'a wildcard over a public suffix'],
    [{ allow: ['10.0.0.1'] }, /10\.0\.0\.1/, 'an IP literal'],
    [{ allow: ['https://pypi.org/simple'] }, /pypi\.org/, 'a URL'],
    [{ allow: ['a.test'], deny: ['a.test'] }, /both allowed and denied/, 'one host both ways'],
    [{ allow: 'pypi.org' }, /allow/, 'not a list'],
    [{ remove: ['pypi.org'] }, /remove/, 'an unknown key'],
  ];
  for (const [change, words, what] of rows) {
    const err = await s.provider.changeAllowHosts(h, change as never).catch((e: unknown) => e);
    t.ok(isSandboxError(err, 'invalid_spec') && words.test((err as Error).message), `${what}: ${String(err)}`);
  }
  t.same(s.engine.registration(NAME)?.policy.allowHosts, ['deb.debian.org', 'pypi.org'], 'unchanged');
  t.equal(s.engine.count('putRegistration', `${NAME}-egress`), 1, 'only the create wrote it');
});

t.test('no proxy, a fixed policy, no sandbox: refused, saying why', async (t) => {
  const s = fakeSandbox();
  const internal = await s.provider.create(spec('internal'));
  const err = await s.provider.changeAllowHosts(internal, { allow: ['pypi.org'] }).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'invalid_spec') && /no egress proxy/.test((err as Error).message), String(err));
  await s.provider.destroy(internal);
  const gone = await s.provider.changeAllowHosts({ id: NAME }, { allow: ['pypi.org'] }).catch((e: unknown) => e);
  t.ok(isSandboxError(gone, 'not_found'), String(gone));
  // A proxy that takes its policy from its environment (made before live allowlists).
  const h = await s.provider.create(spec());
  const body = s.engine.containers.get(`${NAME}-egress`)?.body;
  if (body?.HostConfig !== undefined) body.HostConfig.Mounts = [];
  s.engine.volumeFiles.clear();
  const fixed = await s.provider.changeAllowHosts(h, { allow: ['pypi.org'] }).catch((e: unknown) => e);
  t.ok(isSandboxError(fixed, 'allowlist_fixed') && /create it again/.test((fixed as Error).message), String(fixed));
});

t.test('a proxy rebuilt by recovery keeps the changed list', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create(spec());
  await s.provider.changeAllowHosts(h, { allow: ['crates.io'], deny: ['deb.debian.org'] });
  await s.engine.stopContainer(NAME, 0);
  await s.engine.removeContainer(`${NAME}-egress`);
  t.equal(await s.provider.resume(h), 'running');
  t.same(s.engine.registration(NAME)?.policy.allowHosts, ['pypi.org', 'crates.io'], 'the volume\'s list, not the label\'s');
  t.same(await s.provider.changeAllowHosts(h, { allow: ['deb.debian.org'] }), ['pypi.org', 'crates.io', 'deb.debian.org'], 'and changes on');
});

t.test('a host the deployment inspects, or binds a secret to, is never allowed live past its inspection', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cap-state-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const s = fakeSandbox({
    stateDir: join(dir, 'state'),
    inspectHosts: ['*.npmjs.org', 'pkg.go.dev'],
    secrets: [{ name: 'GITHUB_TOKEN', hosts: ['api.github.com'], header: 'Authorization', format: 'Bearer {}' }],
  });
  // Not inspected: its proxy reads a registration, whose entries are plain tunnels.
  const h = await s.provider.create(spec());
  // Each spelling that reaches an inspected name: the entry itself, a name below a wildcard, a
  // wildcard over a name.
  for (const host of ['*.npmjs.org', 'registry.npmjs.org', '*.a.npmjs.org', 'pkg.go.dev', '*.go.dev', 'api.github.com']) {
    const err = await s.provider.changeAllowHosts(h, { allow: ['crates.io', host] }).catch((e: unknown) => e);
    t.ok(isSandboxError(err, 'invalid_spec') && (err as Error).message.includes(host), `${host}: refused, named (${String(err)})`);
  }
  t.same(s.engine.registration(NAME)?.policy.allowHosts, ['deb.debian.org', 'pypi.org'], 'nothing written: a plain tunnel there would pass uninspected');
  t.same(await s.provider.changeAllowHosts(h, { allow: ['npmjs.org', '*.github.com'] }), ['deb.debian.org', 'pypi.org', 'npmjs.org', '*.github.com'], 'entries a create would not inspect either are allowed (a wildcard is no secret host)');
});

t.test('two changes at once in two controller processes: a deny is never undone by an allow that read the list before it', async (t) => {
  const s = fakeSandbox();
  const other = s.withConfig({});
  const h = await s.provider.create(spec());
  // The other process has read the registration lately (the check before a command), so its
  // change reads it twice: the list, then the fence just before its write.
  await other.exec(h, 'true');
  const model = s.engine.onExec;
  let cats = 0;
  let reached!: () => void;
  const atFence = new Promise<void>((r) => (reached = r));
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  s.engine.onExec = async (container, request) => {
    if (container === 'cap-live-egress' && request.cmd[0] === 'cat' && ++cats === 2) {
      reached();
      await released;
    }
    return model(container, request);
  };
  // The other process (capybara-sandbox allow, say) read the list, and waits at its fence while
  // this process denies pypi.org.
  const allowing = other.changeAllowHosts(h, { allow: ['crates.io'] }).then(
    (list) => list,
    (err: unknown) => (err as { code?: string }).code,
  );
  await atFence;
  t.same(await s.provider.changeAllowHosts(h, { deny: ['pypi.org'] }), ['deb.debian.org'], 'the deny is done');
  release();
  // Before, the fence compared the lifecycle id alone, which a change keeps: the allow wrote the
  // list it read plus crates.io, pypi.org with it, and both said done.
  t.equal(await allowing, 'conflict', 'the allow that read the list before the deny is refused');
  t.same(s.engine.registration(NAME)?.policy.allowHosts, ['deb.debian.org'], 'the deny stays in force');
});

t.test('an allow whose write lands after a deny in another process, from the list it read before, leaves the deny said not done', async (t) => {
  const s = fakeSandbox();
  const other = s.withConfig({});
  const h = await s.provider.create(spec());
  // The other process's write (its fence passed before the deny) waits; the deny's read of the
  // list after its own write waits for that write to land.
  const put = s.engine.putRegistration.bind(s.engine);
  let puts = 0;
  let atOtherWrite!: () => void;
  const otherWriting = new Promise<void>((r) => (atOtherWrite = r));
  let releaseOther!: () => void;
  const otherReleased = new Promise<void>((r) => (releaseOther = r));
  let denyWrote = false;
  s.engine.putRegistration = async (container, archive) => {
    puts += 1;
    if (puts === 1) {
      atOtherWrite();
      await otherReleased;
    } else if (puts === 2) denyWrote = true;
    return put(container, archive);
  };
  const model = s.engine.onExec;
  let atReadBack!: () => void;
  const readingBack = new Promise<void>((r) => (atReadBack = r));
  let releaseReadBack!: () => void;
  const readBackReleased = new Promise<void>((r) => (releaseReadBack = r));
  let heldReadBack = false;
  s.engine.onExec = async (container, request) => {
    if (denyWrote && !heldReadBack && request.cmd[0] === 'cat') {
      heldReadBack = true;
      atReadBack();
      await readBackReleased;
    }
    return model(container, request);
  };
  const outcome = (p: Promise<string[]>) => p.then((list) => list, (err: unknown) => (err as { code?: string }).code);
  const allowing = outcome(other.changeAllowHosts(h, { allow: ['crates.io'] }));
  await otherWriting;
  const denying = outcome(s.provider.changeAllowHosts(h, { deny: ['pypi.org'] }));
  await readingBack;
  releaseOther();
  t.same(await allowing, ['deb.debian.org', 'pypi.org', 'crates.io'], 'the allow is in force');
  releaseReadBack();
  // Before, the deny said done while the allow's later write had pypi.org allowed again.
  t.equal(await denying, 'conflict', 'the deny is said not done: pypi.org is allowed again');
  t.same(s.engine.registration(NAME)?.policy.allowHosts, ['deb.debian.org', 'pypi.org', 'crates.io']);
});
