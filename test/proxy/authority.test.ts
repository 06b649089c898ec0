import t from 'tap';
import { parseAbsoluteUrl, parseConnectTarget } from '../../proxy/index.js';

const connect: { name: string; target: string; want: { host: string; port: number } | 'bad_request' | 'malformed_host' }[] = [
  { name: 'name and port', target: 'example.com:443', want: { host: 'example.com', port: 443 } },
  { name: 'bracketed IPv6 keeps brackets', target: '[::1]:443', want: { host: '[::1]', port: 443 } },
  { name: 'unbracketed IPv6', target: '::1:443', want: 'malformed_host' },
  { name: 'unterminated bracket', target: '[::1:443', want: 'malformed_host' },
  { name: 'text after the bracket', target: '[::1]x:443', want: 'bad_request' },
  { name: 'no port', target: 'example.com', want: 'bad_request' },
  { name: 'empty port', target: 'example.com:', want: 'bad_request' },
  { name: 'service name', target: 'example.com:https', want: 'bad_request' },
  { name: 'leading zero', target: 'example.com:0443', want: 'bad_request' },
  { name: 'port zero', target: 'example.com:0', want: 'bad_request' },
  { name: 'sign', target: 'example.com:+443', want: 'bad_request' },
  { name: 'too large', target: 'example.com:65536', want: 'bad_request' },
  { name: 'largest', target: 'example.com:65535', want: { host: 'example.com', port: 65535 } },
  { name: 'userinfo', target: 'u@example.com:443', want: 'bad_request' },
  { name: 'URL', target: 'http://example.com:443/', want: 'bad_request' },
  { name: 'empty host', target: ':443', want: 'malformed_host' },
];
for (const c of connect) {
  t.test(`CONNECT ${c.name}`, async (t) => {
    const got = parseConnectTarget(c.target);
    if (typeof c.want === 'string') t.match(got, { ok: false, reason: c.want });
    else t.match(got, { ok: true, ...c.want });
  });
}

const urls: { name: string; url: string; want: { host: string; port: number; path: string } | 'bad_request' | 'malformed_host' }[] = [
  { name: 'default port and path', url: 'http://example.com', want: { host: 'example.com', port: 80, path: '/' } },
  { name: 'explicit port', url: 'http://example.com:8080/a', want: { host: 'example.com', port: 8080, path: '/a' } },
  { name: 'query without path', url: 'http://example.com?q=1', want: { host: 'example.com', port: 80, path: '/?q=1' } },
  { name: 'scheme is case-insensitive', url: 'HTTP://example.com/', want: { host: 'example.com', port: 80, path: '/' } },
  { name: 'path kept exactly', url: 'http://example.com//a/../b', want: { host: 'example.com', port: 80, path: '//a/../b' } },
  { name: 'https is not proxied as plain HTTP', url: 'https://example.com/', want: 'bad_request' },
  { name: 'ftp', url: 'ftp://example.com/', want: 'bad_request' },
  { name: 'userinfo', url: 'http://evil.net@example.com/', want: 'bad_request' },
  { name: 'backslash', url: 'http://example.com\\@evil.net/', want: 'bad_request' },
  { name: 'fragment', url: 'http://example.com#@evil.net/', want: 'bad_request' },
  { name: 'unterminated bracket', url: 'http://[::1/', want: 'malformed_host' },
  { name: 'empty port', url: 'http://example.com:/', want: 'bad_request' },
];
for (const c of urls) {
  t.test(`URL ${c.name}`, async (t) => {
    const got = parseAbsoluteUrl(c.url);
    if (typeof c.want === 'string') t.match(got, { ok: false, reason: c.want });
    else t.same(got, { ok: true, ...c.want });
  });
}
