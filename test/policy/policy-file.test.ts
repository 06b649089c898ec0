import t from 'tap';
import { parsePolicyText, PolicyError, buildPolicy } from '../../policy/index.js';

t.test('reads YAML and JSON with defaults', async (t) => {
  t.same(parsePolicyText('allowHosts: [a.example]\n', 'p.yaml'), { version: 1, allowHosts: ['a.example'], connectPorts: [443, 80] });
  t.same(parsePolicyText('{"version":1,"allowHosts":["a.example"],"connectPorts":[8443]}', 'p.json'), {
    version: 1,
    allowHosts: ['a.example'],
    connectPorts: [8443],
  });
});

const bad: { name: string; text: string; path: string }[] = [
  { name: 'unknown key', text: 'allowHosts: []\nallowhosts: [x]\n', path: '(top level)' },
  { name: 'missing allowHosts', text: 'version: 1\n', path: 'allowHosts' },
  { name: 'wrong version', text: 'version: 2\nallowHosts: []\n', path: 'version' },
  { name: 'port out of range', text: 'allowHosts: []\nconnectPorts: [70000]\n', path: 'connectPorts[0]' },
  { name: 'port not a number', text: 'allowHosts: []\nconnectPorts: ["443"]\n', path: 'connectPorts[0]' },
  { name: 'no ports', text: 'allowHosts: []\nconnectPorts: []\n', path: 'connectPorts' },
  { name: 'host not a string', text: 'allowHosts: [1]\n', path: 'allowHosts[0]' },
  { name: 'duplicate key', text: 'allowHosts: [a.example]\nallowHosts: [b.example]\n', path: 'line 2' },
  { name: 'not YAML', text: 'allowHosts: [a\n', path: 'line' },
];
for (const c of bad) {
  t.test(`error names file, path and problem: ${c.name}`, async (t) => {
    const err = t.throws(() => parsePolicyText(c.text, '/etc/egress/policy.yaml')) as PolicyError;
    t.type(err, PolicyError);
    t.equal(err.code, 'invalid_policy');
    t.match(err.message, '/etc/egress/policy.yaml');
    t.match(err.message, c.path);
  });
}

t.test('bad allowlist entries name the entry and why', async (t) => {
  const built = buildPolicy({ allowHosts: ['good.example', '10.0.0.1', 'a..b'] });
  t.equal(built.ok, false);
  if (built.ok) return;
  t.same(
    built.problems.map((p) => p.path),
    ['allowHosts[1]', 'allowHosts[2]'],
  );
  t.match(built.problems[0]?.message, /10\.0\.0\.1.*IP literal/);
});

t.test('test hosts are validated', async (t) => {
  const built = buildPolicy({ allowHosts: ['a.example'], testHosts: { 'a.example': 'not-an-ip' } });
  t.equal(built.ok, false);
  const ok = buildPolicy({ allowHosts: ['a.example'], testHosts: { 'A.Example.': ['127.0.0.1', '::1'] } });
  t.ok(ok.ok);
  if (ok.ok) t.same(ok.policy.testHosts.get('a.example'), ['127.0.0.1', '::1']);
});
