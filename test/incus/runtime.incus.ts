import { randomBytes } from 'node:crypto';
import { loadConfig } from '../../core/config.ts';
import { IncusClient } from '../../lifecycle/runtime/incus/incus-client.ts';
import { IncusRuntime } from '../../lifecycle/runtime/incus/incus-runtime.ts';
import { runtimeContract } from '../runtime/runtime-contract.ts';

/**
 * The contract of lifecycle/runtime/sandbox-runtime.ts against IncusRuntime on this machine's Incus
 * (SVC_RUNTIME=incus npm run setup). Not in `npm test` (its name does not end in .test.ts): the runtime
 * is begun, not finished (docs/incus.md says how far it goes). Run it alone:
 *
 *   NODE_ENV=test npx tsx --test test/incus/runtime.incus.ts
 */
runtimeContract('IncusRuntime', { runsCommands: true }, async () => {
  const instance = `svct${randomBytes(3).toString('hex')}`;
  const config = loadConfig();
  const options = {
    instance,
    addressPool: process.env.SVC_INCUS_ADDRESS_POOL ?? '100.73.0.0/16',
    limits: { memoryMb: config.sandboxMemoryMb, cpus: config.sandboxCpus, pids: config.sandboxPids },
  };
  const client = new IncusClient({ socketPath: process.env.SVC_INCUS_UNIX_SOCKET ?? '/var/lib/incus/unix.socket' });
  const nowhere = new IncusClient({ socketPath: `/tmp/${instance}-no-incus.sock` });
  const runtime = new IncusRuntime(client, options);
  return {
    runtime,
    // a socket that does not exist: Incus cannot be asked (ENOENT on connect)
    unreachable: new IncusRuntime(nowhere, options),
    sandboxName: (suffix) => `svc-${instance}-${suffix}`,
    async cleanup() {
      for (const name of await runtime.withVolumes()) await runtime.removeVolumes(name);
      await client.close();
      await nowhere.close();
    },
  };
});
