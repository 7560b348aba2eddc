import { loadConfig } from './core/config.ts';
import { logger } from './core/logger.ts';
import { guardProcess } from './core/process-guard.ts';
import { startService } from './service.ts';

guardProcess(logger);
const config = loadConfig();
const service = await startService(config, logger);
const apiPort = config.apiPort;
await service.api.listen({ host: '127.0.0.1', port: apiPort });
logger.info(
  { domain: config.domain, https: service.edge.httpsPort, http: service.edge.httpPort, api: `http://127.0.0.1:${apiPort}/api` },
  `service started: https://${config.domain}${service.edge.httpsPort === 443 ? '' : `:${service.edge.httpsPort}`}/api/swagger`,
);

/** Like a container's stop grace period: the process ends this long after a signal, whatever hangs. */
const SHUTDOWN_GRACE_MS = 20_000;

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    logger.info({ signal }, 'shutting down');
    setTimeout(() => {
      logger.error(`shutdown took longer than ${SHUTDOWN_GRACE_MS} ms; exiting`);
      process.exit(1);
    }, SHUTDOWN_GRACE_MS).unref();
    service.close().then(() => process.exit(0), (err) => { logger.error({ err }, 'shutdown failed'); process.exit(1); });
  });
}
