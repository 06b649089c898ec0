/**
 * Method and path rules of allowlist entries (policy/request-rules.ts): how a policy writes them,
 * every way to write them wrong (each a placed error naming the entry and what to write), how a
 * request is checked against them, and that an entry with rules allows no tunnel.
 */
import t from 'tap';
import {
  buildPolicy,
  checkRequest,
  checkTarget,
  decide,
  parsePolicyText,
  placeProblems,
  type AllowedTarget,
  type Lookup,
  type PolicyInput,
} from '../../policy/index.js';

function policy(input: PolicyInput) {
  const built = buildPolicy(input);
  if (!built.ok) throw new Error(JSON.stringify(built.problems));
  return built.policy;
}

const RULED: PolicyInput = {
  allowHosts: [
    { host: 'api.example', methods: ['GET', 'HEAD'], paths: ['/repos/org/*', '/exact', '/'] },
    { host: 'get.example', methods: ['GET'] },
    { host: '*.paths.example', paths: ['/v1/*'] },
    'open.example',
    '*.mixed.example',
    { host: 'ruled.mixed.example', methods: ['POST'] },
  ],
};

t.test('a policy file writes rules on object entries', async (t) => {
  const text = 'allowHosts:\n  - host: api.example\n    methods: [GET, HEAD]\n    paths: ["/repos/org/*", "/exact"]\n  - { host: "*.b.example", paths: ["/v1/*"] }\n';
  const file = parsePolicyText(text, 'p.yaml');
  t.same(file.allowHosts, [
    { host: 'api.example', methods: ['GET', 'HEAD'], paths: ['/repos/org/*', '/exact'] },
    { host: '*.b.example', paths: ['/v1/*'] },
  ]);
  const built = buildPolicy({ allowHosts: file.allowHosts });
  t.ok(built.ok);
  if (!built.ok) return;
  const rules = built.policy.allowlist.match('api.example')?.rules;
  t.same([...(rules?.methods ?? [])], ['GET', 'HEAD']);
  t.same(rules?.paths?.map((p) => [p.kind, p.value]), [['prefix', '/repos/org/'], ['exact', '/exact']]);
  t.same([...built.policy.entryRules.keys()], ['api.example', '*.b.example'], 'the entries with rules, for check');
  t.equal(built.policy.allowlist.match('x.b.example')?.rules?.methods, undefined, 'paths only: any method');
});

const badRules: { name: string; entry: PolicyInput['allowHosts'][number]; path: string; message: RegExp }[] = [
  { name: 'a lower-case method', entry: { host: 'a.example', methods: ['get'] }, path: 'allowHosts[0].methods[0]', message: /"get": methods are case-sensitive.*write "GET"/ },
  { name: 'a method that is no token', entry: { host: 'a.example', methods: ['GET', 'PO ST'] }, path: 'allowHosts[0].methods[1]', message: /"PO ST" is not an HTTP method/ },
  { name: 'an empty method', entry: { host: 'a.example', methods: [''] }, path: 'allowHosts[0].methods[0]', message: /is not an HTTP method/ },
  { name: 'CONNECT', entry: { host: 'a.example', methods: ['CONNECT'] }, path: 'allowHosts[0].methods[0]', message: /"CONNECT" cannot be allowed by a rule.*allows no tunnel/ },
  { name: 'a method twice', entry: { host: 'a.example', methods: ['GET', 'GET'] }, path: 'allowHosts[0].methods[1]', message: /"GET" is listed twice/ },
  { name: 'no methods', entry: { host: 'a.example', methods: [] }, path: 'allowHosts[0].methods', message: /empty list allows nothing; leave methods out/ },
  { name: 'no paths', entry: { host: 'a.example', paths: [] }, path: 'allowHosts[0].paths', message: /empty list allows nothing; leave paths out/ },
  { name: 'a relative path', entry: { host: 'a.example', paths: ['repos/*'] }, path: 'allowHosts[0].paths[0]', message: /"repos\/\*": a path starts with "\/"/ },
  { name: 'a star inside', entry: { host: 'a.example', paths: ['/repos/*/x'] }, path: 'allowHosts[0].paths[0]', message: /"\*" may only end a path, once/ },
  { name: 'two stars', entry: { host: 'a.example', paths: ['/repos/**'] }, path: 'allowHosts[0].paths[0]', message: /"\*" may only end a path, once/ },
  { name: 'a prefix inside a segment', entry: { host: 'a.example', paths: ['/repos/org*'] }, path: 'allowHosts[0].paths[0]', message: /ends in "\/\*": write "\/repos\/org\/\*".*"\/repos\/org-other"/ },
  { name: 'a query', entry: { host: 'a.example', paths: ['/search?q=x'] }, path: 'allowHosts[0].paths[0]', message: /never the query/ },
  { name: 'a fragment', entry: { host: 'a.example', paths: ['/a#b'] }, path: 'allowHosts[0].paths[0]', message: /never the query or a fragment/ },
  { name: 'an encoded slash', entry: { host: 'a.example', paths: ['/a%2fb/*'] }, path: 'allowHosts[0].paths[0]', message: /encoded "\/" \(%2F\)/ },
  { name: 'a dot-dot', entry: { host: 'a.example', paths: ['/a/../b'] }, path: 'allowHosts[0].paths[0]', message: /"\.\." segment/ },
  { name: 'an empty segment', entry: { host: 'a.example', paths: ['//a/*'] }, path: 'allowHosts[0].paths[0]', message: /empty segment/ },
  { name: 'a backslash', entry: { host: 'a.example', paths: ['/a\\b'] }, path: 'allowHosts[0].paths[0]', message: /backslash/ },
  { name: 'a control byte', entry: { host: 'a.example', paths: ['/a\x00'] }, path: 'allowHosts[0].paths[0]', message: /control byte/ },
  { name: 'non-ASCII', entry: { host: 'a.example', paths: ['/café'] }, path: 'allowHosts[0].paths[0]', message: /outside ASCII \(percent-encode it as UTF-8\)/ },
  { name: 'a needless escape', entry: { host: 'a.example', paths: ['/%72epos/*'] }, path: 'allowHosts[0].paths[0]', message: /write "\/repos\/\*"/ },
  { name: 'lower-case hex', entry: { host: 'a.example', paths: ['/caf%c3%a9'] }, path: 'allowHosts[0].paths[0]', message: /write "\/caf%C3%A9"/ },
  { name: 'a path twice', entry: { host: 'a.example', paths: ['/a', '/a'] }, path: 'allowHosts[0].paths[1]', message: /"\/a" is listed twice/ },
  { name: 'rules on an opaque entry', entry: { host: 'a.example', tunnel: 'opaque', methods: ['GET'] }, path: 'allowHosts[0]', message: /^"a\.example": an entry with methods or paths allows no tunnel.*tunnel: opaque means nothing here/ },
];
for (const c of badRules) {
  t.test(`a bad rule is a load error at its place: ${c.name}`, async (t) => {
    const built = buildPolicy({ allowHosts: [c.entry] });
    t.equal(built.ok, false);
    if (built.ok) return;
    t.equal(built.problems.length, 1, 'one problem');
    t.match(built.problems[0], { path: c.path, message: c.message });
  });
}

t.test('one name listed twice where either has rules is refused: never two sets of rules to choose from', async (t) => {
  for (const allowHosts of [
    ['a.example', { host: 'A.example.', methods: ['GET'] }],
    [{ host: 'a.example', methods: ['GET'] }, 'a.example'],
    [{ host: 'a.example', methods: ['GET'] }, { host: 'a.example', methods: ['GET'] }],
  ] as PolicyInput['allowHosts'][]) {
    const built = buildPolicy({ allowHosts });
    t.equal(built.ok, false);
    if (!built.ok) t.match(built.problems[0], { path: 'allowHosts[1]', message: /listed again, and one of the two has methods or paths; list it once/ });
  }
  t.ok(buildPolicy({ allowHosts: [{ host: 'a.example', methods: ['GET'] }], tunnelDefault: 'opaque' }).ok, 'an opaque default does not make a ruled entry an error');
});

t.test('a rule error in a file is placed at its line and column', async (t) => {
  const text = 'allowHosts:\n  - a.example\n  - host: b.example\n    methods: [GET, post]\n';
  const built = buildPolicy({ allowHosts: parsePolicyText(text, 'p.yaml').allowHosts });
  t.equal(built.ok, false);
  if (built.ok) return;
  t.same(placeProblems(text, built.problems), [
    { path: 'allowHosts[1].methods[1] (line 4, column 20)', message: '"post": methods are case-sensitive (RFC 9110 §9.1) and clients send them in upper case; write "POST"' },
  ]);
});

t.test('a rule that is not a list of strings is refused by the schema, at its place', async (t) => {
  const err = t.throws(() => parsePolicyText('allowHosts:\n  - { host: a.example, methods: GET }\n', 'p.yaml'));
  t.match((err as Error).message, /allowHosts\[0\]\.methods \(line 2, column 33\)/);
  const err2 = t.throws(() => parsePolicyText('allowHosts:\n  - { host: a.example, paths: [1] }\n', 'p.yaml'));
  t.match((err2 as Error).message, /allowHosts\[0\]\.paths\[0\]/);
});

function target(host: string): AllowedTarget {
  const checked = checkTarget(policy(RULED), host, 80);
  if (!checked.allowed) throw new Error(checked.detail);
  return checked;
}

t.test('requests are checked against the rules of the entry that matched', async (t) => {
  const rows: { name: string; host: string; method: string; path: string; headers?: string[]; verdict: { allowed: true; target: string } | { reason: string; detail: RegExp } }[] = [
    { name: 'an allowed method and prefix', host: 'api.example', method: 'GET', path: '/repos/org/x?page=2', verdict: { allowed: true, target: '/repos/org/x?page=2' } },
    { name: 'deep below the prefix', host: 'api.example', method: 'HEAD', path: '/repos/org/a/b/c', verdict: { allowed: true, target: '/repos/org/a/b/c' } },
    { name: 'the prefix itself, with its slash', host: 'api.example', method: 'GET', path: '/repos/org/', verdict: { allowed: true, target: '/repos/org/' } },
    { name: 'an exact path', host: 'api.example', method: 'GET', path: '/exact', verdict: { allowed: true, target: '/exact' } },
    { name: 'the root, listed exactly', host: 'api.example', method: 'GET', path: '/?q', verdict: { allowed: true, target: '/?q' } },
    { name: 'forwarded in normal form', host: 'api.example', method: 'GET', path: '/%72epos/org/%7Eme%3a?%2e%2e', verdict: { allowed: true, target: '/repos/org/~me%3A?%2e%2e' } },
    { name: 'a method not listed', host: 'api.example', method: 'POST', path: '/repos/org/x', verdict: { reason: 'method_not_allowed', detail: /^POST is not allowed by the allowHosts entry api\.example \(methods GET, HEAD; paths \/repos\/org\/\*, \/exact, \/\)$/ } },
    { name: 'methods are exact', host: 'api.example', method: 'DELETE', path: '/exact', verdict: { reason: 'method_not_allowed', detail: /DELETE/ } },
    { name: 'the prefix without its slash', host: 'api.example', method: 'GET', path: '/repos/org', verdict: { reason: 'path_not_allowed', detail: /^\/repos\/org is not allowed by the allowHosts entry api\.example/ } },
    { name: 'a neighbour of the prefix', host: 'api.example', method: 'GET', path: '/repos/organisation/x', verdict: { reason: 'path_not_allowed', detail: /not allowed/ } },
    { name: 'below an exact path', host: 'api.example', method: 'GET', path: '/exact/more', verdict: { reason: 'path_not_allowed', detail: /not allowed/ } },
    { name: 'paths are case-sensitive', host: 'api.example', method: 'GET', path: '/Repos/org/x', verdict: { reason: 'path_not_allowed', detail: /not allowed/ } },
    { name: 'the query is not matched', host: 'api.example', method: 'GET', path: '/other?/repos/org/x', verdict: { reason: 'path_not_allowed', detail: /^\/other is not allowed/ } },
    { name: 'encoded traversal', host: 'api.example', method: 'GET', path: '/repos/org/..%2f..%2fother', verdict: { reason: 'path_not_allowed', detail: /^the path \/repos\/org\/\.\.%2f\.\.%2fother has an encoded "\/" \(%2F\).*allowHosts entry api\.example has path rules/ } },
    { name: 'encoded dot-dot', host: 'api.example', method: 'GET', path: '/repos/org/%2e%2e/x', verdict: { reason: 'path_not_allowed', detail: /"\.\." segment/ } },
    { name: 'an empty first segment', host: 'api.example', method: 'GET', path: '//repos/org', verdict: { reason: 'path_not_allowed', detail: /empty segment/ } },
    { name: 'an encoded NUL', host: 'api.example', method: 'GET', path: '/repos/org/x%00', verdict: { reason: 'path_not_allowed', detail: /control byte/ } },
    { name: 'the method is checked first', host: 'api.example', method: 'PUT', path: '/repos/org/../x', verdict: { reason: 'method_not_allowed', detail: /PUT/ } },
    { name: 'a method-override header naming a method not listed', host: 'api.example', method: 'GET', path: '/exact', headers: ['Accept', '*/*', 'X-HTTP-Method-Override', ' delete '], verdict: { reason: 'method_not_allowed', detail: /^the X-HTTP-Method-Override header asks the server for DELETE, which is not allowed by the allowHosts entry api\.example/ } },
    { name: 'X-HTTP-Method, any case', host: 'api.example', method: 'GET', path: '/exact', headers: ['x-http-method', 'PUT'], verdict: { reason: 'method_not_allowed', detail: /x-http-method header asks the server for PUT/ } },
    {
      name: 'an override that names no method is not quoted: a placeholder in another case than the screening compares would be, upper-cased',
      host: 'api.example',
      method: 'GET',
      path: '/exact',
      headers: ['X-HTTP-Method-Override', 'akiaq3zk7ty2m8xw4rjd'],
      verdict: { reason: 'method_not_allowed', detail: /^the X-HTTP-Method-Override header asks the server for a method it does not name here, which is not allowed/ },
    },
    { name: 'an empty override', host: 'api.example', method: 'GET', path: '/exact', headers: ['X-HTTP-Method-Override', ' '], verdict: { reason: 'method_not_allowed', detail: /asks the server for an empty method,/ } },
    { name: 'X-Method-Override, the second of two', host: 'api.example', method: 'GET', path: '/exact', headers: ['X-Method-Override', 'HEAD', 'X-Method-Override', 'PATCH'], verdict: { reason: 'method_not_allowed', detail: /for PATCH/ } },
    { name: 'an empty override', host: 'api.example', method: 'GET', path: '/exact', headers: ['X-HTTP-Method-Override', ''], verdict: { reason: 'method_not_allowed', detail: /for an empty method/ } },
    { name: 'an override naming an allowed method', host: 'api.example', method: 'GET', path: '/exact', headers: ['X-HTTP-Method-Override', 'head'], verdict: { allowed: true, target: '/exact' } },
    { name: 'an override without method rules: not judged', host: 'x.paths.example', method: 'GET', path: '/v1/a', headers: ['X-HTTP-Method-Override', 'DELETE'], verdict: { allowed: true, target: '/v1/a' } },
    { name: 'methods only: any path, as sent', host: 'get.example', method: 'GET', path: '/a/../b%2f', verdict: { allowed: true, target: '/a/../b%2f' } },
    { name: 'methods only: another method', host: 'get.example', method: 'HEAD', path: '/', verdict: { reason: 'method_not_allowed', detail: /allowHosts entry get\.example \(methods GET\)/ } },
    { name: 'paths only, on a wildcard: any method', host: 'x.paths.example', method: 'DELETE', path: '/v1/thing', verdict: { allowed: true, target: '/v1/thing' } },
    { name: 'paths only, on a wildcard: another path', host: 'x.paths.example', method: 'GET', path: '/v2/thing', verdict: { reason: 'path_not_allowed', detail: /allowHosts entry \*\.paths\.example \(paths \/v1\/\*\)/ } },
    { name: 'no rules: anything', host: 'open.example', method: 'DELETE', path: '//x/../y', verdict: { allowed: true, target: '//x/../y' } },
    { name: 'an exact entry with rules wins over a wildcard without', host: 'ruled.mixed.example', method: 'GET', path: '/', verdict: { reason: 'method_not_allowed', detail: /entry ruled\.mixed\.example/ } },
    { name: 'the wildcard without rules allows its other names', host: 'other.mixed.example', method: 'GET', path: '/', verdict: { allowed: true, target: '/' } },
  ];
  for (const row of rows) {
    const verdict = checkRequest(target(row.host), { method: row.method, target: row.path, rawHeaders: row.headers ?? [] });
    if ('allowed' in row.verdict) t.same(verdict, row.verdict, row.name);
    else {
      t.match(verdict, { allowed: false, reason: row.verdict.reason, host: row.host, port: 80 }, row.name);
      if (!verdict.allowed) t.match(verdict.detail, row.verdict.detail, row.name);
    }
  }
});

t.test('a long path is quoted cut in the detail, and a long list of paths named in part', async (t) => {
  const paths = Array.from({ length: 9 }, (_, i) => `/p${i}`);
  const long = policy({ allowHosts: [{ host: 'a.example', paths }] });
  const checked = checkTarget(long, 'a.example', 80);
  if (!checked.allowed) throw new Error(checked.detail);
  const verdict = checkRequest(checked, { method: 'GET', target: `/${'x'.repeat(500)}`, rawHeaders: [] });
  t.equal(verdict.allowed, false);
  if (!verdict.allowed) {
    t.match(verdict.detail, /^\/x{95}\.\.\. is not allowed/);
    t.match(verdict.detail, /paths \/p0, \/p1, \/p2, \/p3, \/p4 and 4 more\)$/);
    t.ok(verdict.detail.length < 200, 'the detail stays short');
  }
});

t.test('an entry with rules allows no tunnel, refused before any lookup', async (t) => {
  let lookups = 0;
  const lookup: Lookup = async () => {
    lookups += 1;
    return { ok: true, addresses: ['93.184.215.14'] };
  };
  const p = policy({ ...RULED, testHosts: { 'open.example': '203.0.113.7' } });
  for (const host of ['api.example', 'get.example', 'x.paths.example', 'ruled.mixed.example']) {
    const decision = await decide(p, host, 443, lookup);
    t.match(decision, { allowed: false, reason: 'tunnel_not_allowed', host, port: 443 }, host);
    if (!decision.allowed) t.match(decision.detail, /has rules \(.*\) that the proxy can check only in plain HTTP, so it allows no tunnel/, host);
  }
  t.equal(lookups, 0, 'no DNS for a refused tunnel');
  t.match(await decide(p, 'open.example', 443, lookup), { allowed: true, rule: 'open.example', addresses: ['203.0.113.7'] }, 'an entry without rules still tunnels');
  t.match(await decide(p, 'other.mixed.example', 443, lookup), { allowed: true, rule: '*.mixed.example' }, 'so does the wildcard beside a ruled exact name');
});
