import type { IncusClient } from './incus-client.ts';

/*
 * LXC cannot carry a line break in an environment variable (Incus refuses the instance: "Environment
 * variables cannot contain line breaks"), and three of a sandbox's are PEM texts and one a list of
 * keys. So on Incus these are not passed: the runtime writes into the instance what the image's
 * entrypoint (sandbox-image/entrypoint.sh) would have made of them, before the instance starts: the
 * engine's certificates with a daemon.json that makes dockerd listen on 2376 with --tlsverify (the
 * entrypoint passes no -H then, so the two never conflict), and root's authorized_keys. Written at
 * each create, as the Docker runtime's new container gets them again.
 */

const TLS_DIR = '/etc/docker/tls';
const DAEMON_JSON = '/etc/docker/daemon.json';
const ROOT = { uid: 0, gid: 0 };

/** The environment LXC can take; the rest goes into the instance's files (`write`). */
export function sandboxEnvironment(env: Record<string, string>): { environment: Record<string, string>; write(incus: IncusClient, instance: string): Promise<void> } {
  const { SVC_TLS_CA: ca, SVC_TLS_CERT: cert, SVC_TLS_KEY: key, SVC_SSH_AUTHORIZED_KEYS: keys, ...environment } = env;
  for (const [name, value] of Object.entries(environment)) {
    if (/[\r\n]/.test(value)) throw new Error(`the sandbox's environment variable ${name} holds a line break, which Incus cannot pass on`);
  }
  const pem = (text: string) => (text.endsWith('\n') ? text : `${text}\n`);
  return {
    environment,
    async write(incus, instance) {
      if (ca && cert && key) {
        await incus.putFile(instance, `${TLS_DIR}/ca.pem`, pem(ca), { ...ROOT, mode: 0o444 });
        await incus.putFile(instance, `${TLS_DIR}/cert.pem`, pem(cert), { ...ROOT, mode: 0o444 });
        await incus.putFile(instance, `${TLS_DIR}/key.pem`, pem(key), { ...ROOT, mode: 0o400 });
        await incus.putFile(instance, DAEMON_JSON, `${JSON.stringify({
          hosts: ['tcp://0.0.0.0:2376', 'unix:///var/run/docker.sock'],
          tlsverify: true, tlscacert: `${TLS_DIR}/ca.pem`, tlscert: `${TLS_DIR}/cert.pem`, tlskey: `${TLS_DIR}/key.pem`,
        }, null, 2)}\n`, { ...ROOT, mode: 0o644 });
      } else {
        await incus.deleteFile(instance, DAEMON_JSON); // no certificates: the unix socket only, as on Docker
      }
      if (keys !== undefined) {
        await incus.putFile(instance, '/root/.ssh', undefined, { ...ROOT, mode: 0o700 });
        await incus.putFile(instance, '/root/.ssh/authorized_keys', keys ? `${keys}\n` : '', { ...ROOT, mode: 0o600 });
      }
    },
  };
}
