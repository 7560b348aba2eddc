import { isLocalDomain, type Addresses } from '../core/addresses.ts';
import type { EngineCerts } from '../store/index.ts';
import type { ManagerAccess } from './manager-access.ts';
import type { ZipEntry } from './zip.ts';

export interface ExportFolderInput {
  sandbox: string;
  user: string;
  certs: Pick<EngineCerts, 'ca_cert' | 'client_cert' | 'client_key'>;
  /** The token minted for this export (limited to the sandbox) and its name in the token list. */
  token: { value: string; name: string };
  addresses: Addresses;
  /** The service's own CA, when it has one (no operator certificate): clients must trust it. */
  serviceCa: string | null;
  manager: ManagerAccess;
  engineHost: string;
  now: Date;
}

/** `svc-<sandbox>/`, or the sandbox name itself when it already carries the prefix. */
export function exportFolderName(sandbox: string): string {
  return sandbox.startsWith('svc-') ? sandbox : `svc-${sandbox}`;
}

/** The files of an export folder (spec 1.7), paths relative to its parent. Pure: no I/O. */
export function exportFolder(input: ExportFolderInput): ZipEntry[] {
  const dir = exportFolderName(input.sandbox);
  const dockerHost = `tcp://${input.engineHost}:${input.addresses.port}`;
  const env = [
    `# Sandbox ${input.sandbox} of ${input.user}, exported ${input.now.toISOString()}.`,
    `# SVC_TOKEN is a secret: never print it or commit it. It is listed under Access tokens as "${input.token.name}"; revoke it there.`,
    `SVC_URL=${input.addresses.api}`,
    `SVC_TOKEN=${input.token.value}`,
    `SVC_SANDBOX=${input.sandbox}`,
    `SVC_AGENT_GUIDE=${input.addresses.guide}`,
    `SVC_DOCKER_HOST=${dockerHost}`,
    ...('token' in input.manager
      ? [`SVC_MANAGER_URL=${input.manager.url}`, `SVC_MANAGER_TOKEN=${input.manager.token}`]
      : [`# Manager: not included (${input.manager.reason.replace(/[\r\n)]+/g, ' ')})`]),
    '',
  ].join('\n');
  return [
    { path: `${dir}/`, mode: 0o755 },
    { path: `${dir}/svc.env`, content: env, mode: 0o600 },
    { path: `${dir}/.gitignore`, content: GITIGNORE, mode: 0o644 },
    { path: `${dir}/README.md`, content: readme(input, dir, dockerHost), mode: 0o644 },
    { path: `${dir}/docker/`, mode: 0o700 },
    { path: `${dir}/docker/ca.pem`, content: input.certs.ca_cert, mode: 0o644 },
    { path: `${dir}/docker/cert.pem`, content: input.certs.client_cert, mode: 0o644 },
    { path: `${dir}/docker/key.pem`, content: input.certs.client_key, mode: 0o600 },
    ...(input.serviceCa ? [{ path: `${dir}/service-ca.pem`, content: input.serviceCa, mode: 0o644 }] : []),
  ];
}

const GITIGNORE = `# svc.env holds SVC_TOKEN and docker/key.pem the engine's client key: never commit them.
svc.env
.env
docker/
`;

/** How a user's machine gets the service's names: the machine itself for *.localhost, else DNS. */
function namesHow(domain: string): string {
  if (isLocalDomain(domain)) {
    return `These are the service's own machine: use them there (or through a tunnel to it). On it
\`npm run setup\` made every \`*.localhost\` name resolve (libnss-myhostname); on another Linux machine
\`sudo apt-get install libnss-myhostname\` does the same. Browsers and curl resolve them themselves.`;
  }
  return `A wildcard DNS record \`*.${domain}\` pointing at the service makes them resolve everywhere;
until the operator has one, add them to \`/etc/hosts\`.`;
}

function readme(input: ExportFolderInput, dir: string, dockerHost: string): string {
  const { addresses: a, sandbox } = input;
  const cacert = input.serviceCa ? ' --cacert service-ca.pem' : '';
  return `# ${dir}: access to sandbox ${sandbox}

Everything a client (a person or a coding agent) needs to use sandbox \`${sandbox}\` on ${a.site}.
Read the agent guide first: ${a.guide}

| file | what |
|---|---|
| \`svc.env\` | \`SVC_URL\`, \`SVC_TOKEN\` (an access token limited to this sandbox), \`SVC_SANDBOX\`, \`SVC_AGENT_GUIDE\`, \`SVC_DOCKER_HOST\`, the management tool's values or the reason they are absent |
| \`docker/ca.pem\`, \`docker/cert.pem\`, \`docker/key.pem\` | the client certificates of the sandbox's own Docker engine (mutual TLS) |
${input.serviceCa ? "| `service-ca.pem` | the service's certificate authority: trust it to reach " + a.site + ' (`curl --cacert service-ca.pem`) |\n' : ''}
**Secrets.** \`SVC_TOKEN\` and \`docker/key.pem\` act as you: never print them, never commit them
(\`.gitignore\` here keeps them out of git), never put the token in a URL. Revoke the token under
Access tokens in ${a.site} if it leaks; it is named "${input.token.name}".

## Use it from a shell (run in this folder)

\`\`\`sh
set -a; . ./svc.env; set +a
curl -sf${cacert} -H "Authorization: Bearer $SVC_TOKEN" "$SVC_URL/sandboxes/$SVC_SANDBOX"
curl -sf${cacert} -X POST -H "Authorization: Bearer $SVC_TOKEN" "$SVC_URL/sandboxes/$SVC_SANDBOX/start"   # if not running

export DOCKER_HOST=$SVC_DOCKER_HOST DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$PWD/docker
docker ps
docker compose -p myapp up -d --build
\`\`\`

Or, once, a Docker context (then \`docker --context ${sandbox} …\`):

\`\`\`sh
docker context create ${sandbox} --docker "host=${dockerHost},ca=$PWD/docker/ca.pem,cert=$PWD/docker/cert.pem,key=$PWD/docker/key.pem"
\`\`\`

While the sandbox sleeps its engine answers with a connection reset or EOF: start it first.
Ports published on all interfaces (\`"8080:8080"\`) get addresses under ${a.domain}; see the guide.

## The CLI

\`\`\`sh
curl -so svc.mjs${cacert} ${a.site}/cli/svc.mjs   # one file, Node 18 or later, nothing to install
node svc.mjs --help                      # status, exec, cp, logs, ssh, docker-context, up, names …
\`\`\`

## Names

The sandbox is reached by names under ${a.domain}: \`${sandbox}-engine.${a.domain}\` (its Docker engine),
\`${sandbox}-shell-tcp.${a.domain}\` (ssh) and one per app. ${namesHow(a.domain)}
\`node svc.mjs names\` says which of them resolve on your machine and prints the \`/etc/hosts\` line
for those that do not.

## For a coding agent (AGENTS.md)

Copy this into the project's AGENTS.md:

\`\`\`md
Deploy target: sandbox ${sandbox}. Values are in ${dir}/svc.env (never print or commit SVC_TOKEN or
${dir}/docker/key.pem). Follow ${a.guide}.
\`\`\`
`;
}
