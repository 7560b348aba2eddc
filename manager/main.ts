import fs from 'node:fs';
import { pino } from 'pino';
import { buildManager } from './server.ts';

/**
 * Entry point of the tool's image (scripts/build-manager-image.sh). Settings from the environment:
 *   MANAGER_PORT (9000), MANAGER_DATA_DIR (/data), MANAGER_DOCKER_SOCKET (/var/run/docker.sock),
 *   MANAGER_COMPOSE_BIN (/usr/local/bin/docker-compose), MANAGER_ADMIN_PASSWORD_HASH (scrypt hash
 *   the service sets; without it an existing state keeps its own).
 */
const env = process.env;
const logger = pino({ level: env.LOG_LEVEL || 'info', redact: ['req.headers.authorization', 'req.headers["x-api-key"]'] });

async function main(): Promise<void> {
  const port = Number(env.MANAGER_PORT || 9000);
  const dockerSocket = env.MANAGER_DOCKER_SOCKET || '/var/run/docker.sock';
  const composeBin = env.MANAGER_COMPOSE_BIN || '/usr/local/bin/docker-compose';
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`MANAGER_PORT must be a port number, got "${env.MANAGER_PORT}"`);
  if (!fs.existsSync(dockerSocket)) throw new Error(`no engine socket at ${dockerSocket}: mount it (-v /var/run/docker.sock:/var/run/docker.sock)`);
  const app = await buildManager({
    dataDir: env.MANAGER_DATA_DIR || '/data',
    dockerSocket,
    composeBin,
    adminPasswordHash: env.MANAGER_ADMIN_PASSWORD_HASH || undefined,
    logger,
  });
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => void app.close().then(() => process.exit(0)));
  }
  await app.listen({ host: '0.0.0.0', port });
}

main().catch((err) => {
  logger.fatal({ err: (err as Error).message }, 'the management tool could not start');
  process.exit(1);
});
