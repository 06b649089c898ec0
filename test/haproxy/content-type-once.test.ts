/**
 * One Content-Type per body, through the real HAProxy: HAProxy's req.hdr() reads the last header
 * (or the last comma-separated part of one), Go's Header.Get the first. Before this rule an archive
 * call with "application/x-www-form-urlencoded" first and the tar type last passed the proxy, and
 * dockerd read its body as form fields (path, copyUIDGID, noOverwriteDirNonDir are read from the
 * form before the query) instead of as the archive. Refused before any container is looked up.
 */
import t from 'tap';
import { dockerTest, startSocketProxy, SOCKET_PROXY_IMAGE } from '../support/docker.js';
import { fileNeeds } from '../support/needs.js';
import { send } from './raw-http.js';

await fileNeeds(t, 'engine');

t.test('a body with two Content-Types, or one with two values, is refused', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const proxy = await startSocketProxy(t, env);
  const archive = `/v1.41/containers/${env.name('ct')}/archive?path=%2Fworkspace`;
  const tar = '\0'.repeat(1024);
  const create = `/v1.41/containers/create?name=${env.name('ct')}`;
  const rows = [
    { what: 'an archive: form first, tar last', path: archive, method: 'PUT', type: ['application/x-www-form-urlencoded', 'application/x-tar'], body: tar },
    { what: 'an archive: both in one header', path: archive, method: 'PUT', type: 'application/x-www-form-urlencoded, application/x-tar', body: tar },
    { what: 'a create: text first, JSON last', path: create, method: 'POST', type: ['text/plain', 'application/json'], body: '{}' },
  ];
  for (const row of rows) {
    const res = await send(proxy.socketPath, { method: row.method, path: row.path, headers: { 'Content-Type': row.type }, body: row.body });
    t.same([res.status, res.headers['x-socket-proxy-deny']], [403, 'content_type'], row.what);
  }
});
