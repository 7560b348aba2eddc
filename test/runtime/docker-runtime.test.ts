import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { loadConfig } from '../../core/config.ts';
import { DockerRuntime } from '../../lifecycle/runtime/docker-runtime.ts';
import { engineClient } from '../../lifecycle/runtime/engine-client.ts';
import { removeInstance } from '../../harness/service.ts';
import { sandboxDocker } from '../../harness/sandbox-engine.ts';
import { runtimeContract } from './runtime-contract.ts';

/** The contract of lifecycle/runtime/sandbox-runtime.ts against DockerRuntime on the real sandbox engine. */
runtimeContract('DockerRuntime', { runsCommands: true }, async () => {
  const config = loadConfig();
  const instance = `svct${randomBytes(3).toString('hex')}`;
  const transferRoot = fs.mkdtempSync(path.join(os.tmpdir(), `${instance}-transfer-`));
  const options = {
    image: config.sandboxImage,
    runtime: config.sandboxRuntime,
    limits: { memoryMb: config.sandboxMemoryMb, cpus: config.sandboxCpus, pids: config.sandboxPids },
    instance,
    logger: pino({ level: 'silent' }),
    transferRoot,
  };
  return {
    runtime: new DockerRuntime(sandboxDocker(), options),
    // an engine socket that does not exist: the engine cannot be asked (ENOENT on connect)
    unreachable: new DockerRuntime(engineClient(`unix://${path.join(transferRoot, 'no-engine.sock')}`), options),
    sandboxName: (suffix) => `svc-${instance}-${suffix}`,
    async cleanup() {
      await removeInstance(instance);
      fs.rmSync(transferRoot, { recursive: true, force: true });
    },
  };
});
