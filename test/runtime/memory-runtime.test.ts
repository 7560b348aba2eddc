import { MemoryRuntime } from '../helpers/memory-runtime.ts';
import { runtimeContract } from './runtime-contract.ts';

/**
 * The lifecycle's test double keeps the promises of the real runtimes (test/runtime/docker-runtime.test.ts
 * checks DockerRuntime against the same suite), so the state machine's unit tests on it mean something.
 */
runtimeContract('MemoryRuntime (the test double)', { runsCommands: false }, async () => {
  const unreachable = new MemoryRuntime();
  unreachable.unreachable = 'connect ENOENT /run/no-engine.sock';
  return {
    runtime: new MemoryRuntime(),
    unreachable,
    sandboxName: (suffix) => `svc-memory-${suffix}`,
    cleanup: async () => undefined,
  };
});
