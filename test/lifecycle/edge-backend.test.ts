import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pino } from 'pino';
import type { AppDirectory } from '../../lifecycle/apps/app-directory.ts';
import type { Lifecycle } from '../../lifecycle/controller.ts';
import { LifecycleEdgeBackend } from '../../lifecycle/edge-backend.ts';
import type { SandboxState } from '../../lifecycle/runtime/sandbox-runtime.ts';
import type { WakeLimits } from '../../lifecycle/wake-limits.ts';

/** The backend's state memory (pure logic): stand-ins for the lifecycle core and the app table. */
test('resolveApp answers "running" from memory for a second, and looks again when asked for a fresh answer', async () => {
  let truth: SandboxState = { status: 'running', address: '10.9.0.2' };
  let inspects = 0;
  const lifecycle = { observe: async () => (inspects++, truth) } as unknown as Lifecycle;
  const apps = {
    resolve: (label: string) => (label === 'svc-a-web' ? { sandbox: 'svc-a', hostPort: 8080, loopbackOnly: false } : undefined),
    onSleeping: () => () => undefined,
  } as unknown as AppDirectory;
  const backend = new LifecycleEdgeBackend(lifecycle, apps, {} as WakeLimits, pino({ level: 'silent' }));

  assert.equal((await backend.resolveApp('svc-a-web'))?.target?.host, '10.9.0.2');
  truth = { status: 'exited' }; // stopped within the second
  assert.equal((await backend.resolveApp('svc-a-web'))?.status, 'running', 'the remembered state');
  assert.equal(inspects, 1);
  assert.deepEqual(await backend.resolveApp('svc-a-web', { fresh: true }), { sandbox: 'svc-a', status: 'exited' });
  assert.equal(inspects, 2);
  // the fresh answer replaces the remembered one
  assert.equal((await backend.resolveApp('svc-a-web'))?.status, 'exited');
  assert.equal(await backend.resolveApp('svc-b-web', { fresh: true }), null);

  // its engine stops answering, then answers again: "unavailable" is never kept, the next request sees it back
  truth = { status: 'unavailable' };
  assert.deepEqual(await backend.resolveApp('svc-a-web', { fresh: true }), { sandbox: 'svc-a', status: 'unavailable' });
  truth = { status: 'running', address: '10.9.0.2' };
  assert.equal((await backend.resolveApp('svc-a-web'))?.target?.host, '10.9.0.2', 'running again at the next request');
});

test('a sandbox going to sleep is forgotten at once: the next request looks afresh (and wakes it) instead of trusting "running"', async () => {
  let truth: SandboxState = { status: 'running', address: '10.9.0.2' };
  const lifecycle = { observe: async () => truth } as unknown as Lifecycle;
  let toldSleeping: (sandbox: string) => void = () => undefined;
  const apps = {
    resolve: () => ({ sandbox: 'svc-a', hostPort: 8080, loopbackOnly: false }),
    onSleeping: (listener: (sandbox: string) => void) => { toldSleeping = listener; return () => undefined; },
  } as unknown as AppDirectory;
  const backend = new LifecycleEdgeBackend(lifecycle, apps, {} as WakeLimits, pino({ level: 'silent' }));
  assert.equal((await backend.resolveApp('svc-a-web'))?.status, 'running');
  toldSleeping('svc-a');
  truth = { status: 'exited' };
  assert.equal((await backend.resolveApp('svc-a-web'))?.status, 'exited', 'not the remembered "running"');
});
