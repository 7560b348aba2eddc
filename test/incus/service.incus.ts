// The client tour (service-tour.ts) on this machine's Incus (SVC_RUNTIME=incus npm run setup). Not in
// `npm test`: this machine runs no Incus daemon unless asked; cluster.test.ts runs the same tour on the
// test cluster. Alone, as root:
//
//   NODE_ENV=test npx tsx --test test/incus/service.incus.ts
import { after, before, describe } from 'node:test';
import { loadConfig } from '../../core/config.ts';
import { startTestService, type TestService } from '../../harness/service.ts';
import { clientTour } from './service-tour.ts';

describe('the service on this machine\'s Incus', () => {
  let t: TestService;
  before(async () => {
    const { runtime, incus } = loadConfig({ ...process.env, SVC_RUNTIME: 'incus' });
    // a domain of its own: inside a sandbox, registry.<domain> is one line of its /etc/hosts
    t = await startTestService({ runtime, incus, sseHeartbeatMs: 300, domain: 'svc-incus.test' });
  });
  after(async () => { await t?.close(); });
  clientTour('with real clients', () => t);
});
