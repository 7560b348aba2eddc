import { randomBytes } from 'node:crypto';
import { IncusClient } from '../../lifecycle/runtime/incus/incus-client.ts';
import { IncusRuntime } from '../../lifecycle/runtime/incus/incus-runtime.ts';
import { runtimeContract } from '../runtime/runtime-contract.ts';
import { incusClient, runtimeOptions } from './endpoint.ts';

/**
 * The contract of lifecycle/runtime/sandbox-runtime.ts against IncusRuntime: on this machine's Incus
 * (SVC_RUNTIME=incus npm run setup), or on the test cluster when its lines are in the environment.
 * Not in `npm test` (its name does not end in .test.ts): the runtime is not finished (docs/incus.md).
 *
 *   NODE_ENV=test npx tsx --test test/incus/runtime.incus.ts
 *   scripts/test-cluster.sh up 3 && eval "$(scripts/test-cluster.sh env)" && NODE_ENV=test npx tsx --test test/incus/runtime.incus.ts
 */
runtimeContract('IncusRuntime', { runsCommands: true }, async () => {
  const instance = `svct${randomBytes(3).toString('hex')}`;
  const client = incusClient();
  const nowhere = new IncusClient({ socketPath: `/tmp/${instance}-no-incus.sock` });
  const options = await runtimeOptions(instance);
  const runtime = new IncusRuntime(client, options.options);
  return {
    runtime,
    // a socket that does not exist: Incus cannot be asked (ENOENT on connect)
    unreachable: new IncusRuntime(nowhere, options.options),
    sandboxName: (suffix) => `svc-${instance}-${suffix}`,
    async cleanup() {
      for (const name of await runtime.withVolumes()) await runtime.removeVolumes(name);
      await client.close();
      await nowhere.close();
      await options.close();
    },
  };
});
