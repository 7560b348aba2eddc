import { randomBytes } from 'node:crypto';
import { IncusClient } from '../../lifecycle/runtime/incus/incus-client.ts';
import { IncusRuntime } from '../../lifecycle/runtime/incus/incus-runtime.ts';
import { runtimeContract } from '../runtime/runtime-contract.ts';
import { incusClient, runtimeOptions } from './endpoint.ts';

/**
 * The contract of lifecycle/runtime/sandbox-runtime.ts against IncusRuntime over HTTPS on the test
 * cluster (cluster.test.ts brings it up): an instance name and a slice of the rig's address pool of
 * its own (the other parts hold 100.64.249/24 and 100.64.250/24), and its cleanup removes every
 * sandbox of that instance, so it leaves the cluster as it found it.
 */
export function contractOnCluster(): void {
  runtimeContract('IncusRuntime on the 3-member cluster', { runsCommands: true }, async () => {
    const instance = `svct${randomBytes(3).toString('hex')}`;
    const client = incusClient();
    // a socket that does not exist: Incus cannot be asked (ENOENT on connect)
    const nowhere = new IncusClient({ socketPath: `/tmp/${instance}-no-incus.sock` });
    const options = await runtimeOptions(instance, '100.64.251.0/24');
    const runtime = new IncusRuntime(client, options.options);
    return {
      runtime,
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
}
