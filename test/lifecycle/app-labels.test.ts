import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { appEntries } from '../../lifecycle/apps/app-labels.ts';
import { listenState } from '../../lifecycle/apps/listeners.ts';

const container = (over: Partial<Parameters<typeof appEntries>[1]> = {}) => ({
  name: 'shop-web-1',
  labels: { 'com.docker.compose.project': 'shop', 'com.docker.compose.service': 'web' },
  running: true,
  ports: [{ containerPort: 80, hostPort: 8080, hostIp: '0.0.0.0' }],
  ...over,
});

describe('app addresses (spec 4.3)', () => {
  it('builds <sandbox-short>-<project>-<container>-port<host_port> without the label', () => {
    assert.deepEqual(appEntries('svc-demo', container()).map((e) => e.label), ['demo-shop-shop-web-1-port8080']);
  });

  it('uses <sandbox>-<subdomain> with the tunnel.subdomain label', () => {
    const c = container({ labels: { ...container().labels, 'tunnel.subdomain': 'shop' } });
    assert.deepEqual(appEntries('svc-demo', c).map((e) => e.label), ['svc-demo-shop']);
  });

  it("marks the management tool's container by its image label, and leaves it private on 127.0.0.1", () => {
    const tool = container({ name: 'manager-manager-1', labels: { 'com.docker.compose.project': 'manager', 'tunnel.subdomain': 'manager', 'svc.tool': 'manager' }, ports: [{ containerPort: 9000, hostPort: 9000, hostIp: '' }] });
    assert.deepEqual(appEntries('svc-demo', tool).map((e) => [e.label, e.tool]), [['svc-demo-manager', 'manager']]);
    assert.equal(appEntries('svc-demo', container()).at(0)?.tool, undefined);
    assert.deepEqual(appEntries('svc-demo', { ...tool, ports: [{ containerPort: 9000, hostPort: 9000, hostIp: '127.0.0.1' }] }), []);
  });

  it('gives no address to ports published on 127.0.0.1, or to labels the edge would misread', () => {
    assert.deepEqual(appEntries('svc-demo', container({ ports: [{ containerPort: 80, hostPort: 8080, hostIp: '127.0.0.1' }] })), []);
    const sneaky = container({ labels: { 'tunnel.subdomain': 'x-engine' } });
    assert.deepEqual(appEntries('svc-demo', sneaky), []);
  });
});

describe('listen state from /proc/net/tcp', () => {
  const header = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n';
  const line = (addr: string, port: number, st = '0A') => `   0: ${addr}:${port.toString(16).toUpperCase().padStart(4, '0')} 00000000:0000 ${st} 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n`;

  it('tells all interfaces, loopback only and not listening apart', () => {
    assert.equal(listenState(header + line('00000000', 8080), 8080), 'all-interfaces');
    assert.equal(listenState(header + line('0100007F', 8080), 8080), 'loopback-only');
    assert.equal(listenState(header + line('0100007F', 8080) + line('00000000000000000000000000000000', 8080), 8080), 'all-interfaces');
    assert.equal(listenState(header + line('00000000000000000000000001000000', 8080), 8080), 'loopback-only');
    assert.equal(listenState(header + line('00000000', 9090), 8080), 'none');
    assert.equal(listenState(header + line('0100007F', 8080, '01'), 8080), 'none', 'an established connection is no listener');
  });
});
