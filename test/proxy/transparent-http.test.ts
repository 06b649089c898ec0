/**
 * Where a request on the transparent HTTP listener goes (proxy/http/transparent-http.ts): the host of
 * its one Host header, on the dialled port; anything that could make the name checked and the
 * server reached differ is refused.
 */
import t from 'tap';
import { transparentTarget } from '../../proxy/http/transparent-http.js';

t.test('routed by the Host header', async (t) => {
  const rows = [
    { name: 'a host on port 80', headers: ['Host', 'example.com'], url: '/a?b', port: 80, target: { ok: true, host: 'example.com', port: 80, path: '/a?b' } },
    { name: 'an explicit :80', headers: ['host', 'example.com:80'], url: '/', port: 80, target: { ok: true, host: 'example.com', port: 80, path: '/' } },
    { name: 'another dialled port, named in Host', headers: ['Host', 'example.com:8080'], url: '/', port: 8080, target: { ok: true, host: 'example.com', port: 8080, path: '/' } },
    { name: 'not yet normalised: the policy does that', headers: ['Host', 'Example.COM.'], url: '/', port: 80, target: { ok: true, host: 'Example.COM.', port: 80, path: '/' } },
  ];
  for (const row of rows) t.same(transparentTarget(row.headers, row.url, row.port), row.target, row.name);
});

t.test('refused', async (t) => {
  const rows = [
    { name: 'no Host', headers: ['Accept', '*/*'], url: '/', port: 80, detail: /needs a Host header/ },
    { name: 'an empty Host', headers: ['Host', ''], url: '/', port: 80, detail: /needs a Host header/ },
    { name: 'two Hosts', headers: ['Host', 'a.example', 'host', 'b.example'], url: '/', port: 80, detail: /more than one Host/ },
    { name: 'a port other than the dialled one', headers: ['Host', 'a.example:8080'], url: '/', port: 80, detail: /names port 8080, but the request came to port 80/ },
    { name: 'no port on a dialled port other than 80', headers: ['Host', 'a.example'], url: '/', port: 8080, detail: /names port 80, but the request came to port 8080/ },
    { name: 'an absolute URL', headers: ['Host', 'a.example'], url: 'http://b.example/', port: 80, detail: /origin-form/ },
    { name: 'an asterisk', headers: ['Host', 'a.example'], url: '*', port: 80, detail: /origin-form/ },
    { name: 'a fragment', headers: ['Host', 'a.example'], url: '/#x', port: 80, detail: /fragment/ },
    { name: 'userinfo in Host', headers: ['Host', 'u@a.example'], url: '/', port: 80, detail: /userinfo/ },
    { name: 'a path in Host', headers: ['Host', 'a.example/x'], url: '/', port: 80, detail: /host\[:port\] only/ },
    { name: 'a backslash in Host', headers: ['Host', 'a.example\\@b.example'], url: '/', port: 80, detail: /host\[:port\] only/ },
    { name: 'a port with a leading zero', headers: ['Host', 'a.example:080'], url: '/', port: 80, detail: /decimal number/ },
  ];
  for (const row of rows) {
    const target = transparentTarget(row.headers, row.url, row.port);
    t.equal(target.ok, false, row.name);
    if (!target.ok) t.match(target.detail, row.detail, row.name);
  }
});
