import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig } from '../../core/config.ts';

/**
 * Issue 14, hole 7: `int()` read process.env whatever environment it was given, and three places
 * parsed the environment apart. One typed Config, read from the environment it is given.
 */
describe('configuration', () => {
  it('reads every value from the environment it is given, not the process one', () => {
    const env = {
      SVC_HTTPS_PORT: '8443', SVC_HTTP_PORT: '0', FILES_MAX_UPLOAD: '1024', SVC_WAKES_PER_HOUR: '3', SVC_SSE_HEARTBEAT_MS: '500',
      SVC_SANDBOX_CPUS: '0.5', SVC_SANDBOX_PIDS: '64', SVC_SANDBOX_MEMORY_MB: '256',
      SVC_API_PORT: '9090', SVC_SCAN_CONCURRENCY: '0', SVC_REGISTRY_UPSTREAM: 'http://127.0.0.1:5999',
    };
    const c = loadConfig(env);
    assert.deepEqual(
      [c.httpsPort, c.httpPort, c.filesMaxUpload, c.wakesPerHour, c.sseHeartbeatMs, c.sandboxCpus, c.sandboxPids, c.sandboxMemoryMb, c.apiPort, c.scanConcurrency, c.registryUpstream],
      [8443, 0, 1024, 3, 500, 0.5, 64, 256, 9090, 0, 'http://127.0.0.1:5999'],
    );
    const defaults = loadConfig({});
    assert.deepEqual([defaults.httpsPort, defaults.apiPort, defaults.scanConcurrency, defaults.registryUpstream], [443, 8080, 2, undefined]);
  });

  it('refuses a bad number with the variable named', () => {
    assert.throws(() => loadConfig({ SVC_HTTPS_PORT: 'x' }), /SVC_HTTPS_PORT must be a non-negative integer, got "x"/);
    assert.throws(() => loadConfig({ SVC_SANDBOX_CPUS: '-1' }), /SVC_SANDBOX_CPUS must be a positive number/);
    assert.throws(() => loadConfig({ SVC_SCAN_CONCURRENCY: '1.5' }), /SVC_SCAN_CONCURRENCY must be a non-negative integer/);
    for (const bad of ['soon', '0', 'off', '90']) {
      assert.throws(() => loadConfig({ SVC_MOVE_DEADLINE: bad }), new RegExp(`SVC_MOVE_DEADLINE must be a duration such as 90s, 30m or 2h, got "${bad}"`));
    }
  });

  it('gives a move a deadline, an hour unless set', () => {
    assert.equal(loadConfig({}).moveDeadlineMs, 3_600_000);
    assert.equal(loadConfig({ SVC_MOVE_DEADLINE: '90s' }).moveDeadlineMs, 90_000);
  });

  it('puts HAProxy in front unless SVC_DATA_PLANE names the reference edge', () => {
    assert.deepEqual([loadConfig({}).dataPlane, loadConfig({ SVC_DATA_PLANE: 'haproxy' }).dataPlane, loadConfig({ SVC_DATA_PLANE: 'node' }).dataPlane], ['haproxy', 'haproxy', 'node']);
    assert.throws(() => loadConfig({ SVC_DATA_PLANE: 'nginx' }), /SVC_DATA_PLANE must be haproxy \(the default.*\) or node \(.*the reference the tests compare against, not for production\), got "nginx"/);
  });
});
