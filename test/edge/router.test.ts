import assert from 'node:assert/strict';
import { test } from 'node:test';
import { routeFor, type Route } from '../../edge/router/host-router.ts';

const cases: [string | null, Route][] = [
  [null, { kind: 'api' }],
  ['localhost', { kind: 'api' }],
  ['registry.localhost', { kind: 'registry' }],
  ['svc-foo-engine.localhost', { kind: 'engine', sandbox: 'svc-foo' }],
  ['svc-foo-shell-tcp.localhost', { kind: 'shell', sandbox: 'svc-foo' }],
  ['svc-foo-db-tcp.localhost', { kind: 'app-tcp', label: 'svc-foo-db' }],
  ['svc-foo-proj-web-1-port8080-tcp.localhost', { kind: 'app-tcp', label: 'svc-foo-proj-web-1-port8080' }],
  ['svc-foo-web.localhost', { kind: 'app-http', label: 'svc-foo-web' }],
  ['svc-foo-proj-web-1-port8080.localhost', { kind: 'app-http', label: 'svc-foo-proj-web-1-port8080' }],
  ['engine.localhost', { kind: 'app-http', label: 'engine' }],
  ['-engine.localhost', { kind: 'unknown' }],
  ['a.b.localhost', { kind: 'unknown' }],
  ['svc-foo-web.example.org', { kind: 'unknown' }],
  ['localhost.evil', { kind: 'unknown' }],
  ['evillocalhost', { kind: 'unknown' }],
  ['under_score.localhost', { kind: 'unknown' }],
  ['127.0.0.1', { kind: 'unknown' }],
];

test('host names route to their kind', () => {
  for (const [name, want] of cases) assert.deepEqual(routeFor(name, 'localhost'), want, String(name));
});

test('a multi-label domain works the same', () => {
  assert.deepEqual(routeFor('sb.example.com', 'sb.example.com'), { kind: 'api' });
  assert.deepEqual(routeFor('registry.sb.example.com', 'SB.example.com'), { kind: 'registry' });
  assert.deepEqual(routeFor('svc-a-engine.sb.example.com', 'sb.example.com'), { kind: 'engine', sandbox: 'svc-a' });
  assert.deepEqual(routeFor('svc-a-web.example.com', 'sb.example.com'), { kind: 'unknown' });
});
