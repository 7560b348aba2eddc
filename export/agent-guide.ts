import type { Addresses } from '../core/addresses.ts';

/**
 * The agent guide served at `SVC_AGENT_GUIDE` (`/agent-guide.md`), written for this deployment's
 * addresses, and `/llms.txt` pointing to it (llmstxt.org shape: H1, summary, link sections).
 * Every command here is one the agent's path test runs (test/ui/agent-path.sh).
 */
export function agentGuide(a: Addresses): string {
  const H = '-H "Authorization: Bearer $SVC_TOKEN"';
  const C = 'curl -sf $CA';
  return `# Sandbox service: guide for coding agents

> How to deploy and run a compose app in a sandbox of ${a.site}, with nothing but an export folder
> \`svc-<sandbox>/\` (svc.env, docker/ca.pem, docker/cert.pem, docker/key.pem, README.md).

**Never print or commit \`SVC_TOKEN\`, \`SVC_MANAGER_TOKEN\` or \`docker/key.pem\`**: they act as the
owner. Do not echo them, do not put the token in a URL (the service refuses that), pass it only in the
\`Authorization\` header or on stdin.

## 1. Read svc.env

\`\`\`sh
cd svc-<sandbox>                                  # the export folder
set -a; . ./svc.env; set +a                       # SVC_URL, SVC_TOKEN, SVC_SANDBOX, SVC_AGENT_GUIDE, SVC_DOCKER_HOST
CA=; [ -f service-ca.pem ] && CA="--cacert $PWD/service-ca.pem"   # the service's own CA, when the folder has it
\`\`\`

\`SVC_URL\` is ${a.api}. \`SVC_MANAGER_URL\`/\`SVC_MANAGER_TOKEN\` are present only when the sandbox has a
management tool; otherwise a line \`# Manager: not included (<reason>)\` says why.

## 2. Check the sandbox, start it

\`\`\`sh
${C} ${H} "$SVC_URL/me"                                   # who you are; "sandbox" = the one your token may use
${C} ${H} "$SVC_URL/sandboxes/$SVC_SANDBOX"               # status: running | exited (asleep) | deep_sleep | unavailable
${C} -X POST ${H} "$SVC_URL/sandboxes/$SVC_SANDBOX/start" # answers once it runs: seconds, about 30 s from deep sleep
until ${C} ${H} "$SVC_URL/sandboxes/$SVC_SANDBOX" | grep -q '"status":"running"'; do sleep 2; done
\`\`\`

\`unavailable\`: the host that holds the sandbox does not answer. Nothing is lost and nothing can be done
until it does: starts, files and commands answer 503 with Retry-After, its addresses a 503 page with
\`X-Svc-Unavailable: 1\`. Wait and read the record again; it shows its real status once the host is back.

One command in the sandbox, as root in /root, in one call (wakes an asleep sandbox; \`timeout\` in seconds,
default 60; stdout/stderr cut at 1 MiB each, \`exec/stream\` streams NDJSON instead):

\`\`\`sh
${C} ${H} -H 'content-type: application/json' -d '{"command": "df -h /; docker ps"}' "$SVC_URL/sandboxes/$SVC_SANDBOX/exec"
# → {"exit_code":0,"stdout":"…","stderr":"","truncated":false,"timed_out":false,…}
\`\`\`

Or the service's CLI (one file, Node 18+, nothing to install; it reads svc.env here and never prints the token):
\`node svc.mjs exec -- CMD…\` (exit code passed through), \`cp\`, \`logs\`, \`up\`, \`ssh\`, \`docker-context\`; \`node svc.mjs --help\`.

\`\`\`sh
curl -sf $CA -o svc.mjs ${a.site}/cli/svc.mjs && node svc.mjs exec -- sh -c 'uname -a; docker ps'
\`\`\`

A sleeping sandbox's engine answers with a connection reset or EOF (\`error during connect\`, \`EOF\`):
that is expected; an engine connection never wakes it. Start it first.

## 3. Deploy with docker compose

\`\`\`sh
export DOCKER_HOST=$SVC_DOCKER_HOST DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$PWD/docker
docker compose -p myapp up -d --build          # always name the project (-p); rerun to update
docker compose -p myapp ps
\`\`\`

In the compose file:
- publish ports on all interfaces: \`ports: ["8080:8080"]\`. A port published on \`127.0.0.1\` gets no address;
- the app must listen on \`0.0.0.0\` inside its container (an app on 127.0.0.1 gets an error page);
- label \`tunnel.subdomain: web\` on a service gives it \`https://<sandbox>-web.${a.domain}${a.port === 443 ? '' : `:${a.port}`}\`;
  without it the address is \`https://<sandbox without svc->-<project>-<container>-port<host port>.${a.domain}${a.port === 443 ? '' : `:${a.port}`}\`;
- every address is public; label \`tunnel.visibility: owner\` (the sandbox's owner and admins) or \`authenticated\`
  (any user of this service) makes it private: browsers sign in, scripts send \`Authorization: Bearer <token>\`
  (the app never sees it), others get 403; a private app's \`-tcp\` twin is refused;
- use a fixed image tag per release (\`myapp:1.4.2\`, not \`latest\`); changed services are recreated, volumes kept;
- \`restart: unless-stopped\` (or \`always\`): only such containers start again when the sandbox wakes.

## 4. Find the app's address, wait until it answers

\`\`\`sh
${C} ${H} "$SVC_URL/sandboxes/$SVC_SANDBOX"    # tunnel_urls: the addresses; apps[]: {url, answers}
\`\`\`

An address answers a few seconds after its container starts. While the sandbox is asleep or starting,
it answers **HTTP 200 with an HTML waiting page and the header \`X-Svc-Waiting: 1\`** (and Retry-After):
that is not your app. Retry until a response comes without that header:

\`\`\`sh
URL=https://...                                  # from tunnel_urls
until h=$(curl -s $CA -D - -o /dev/null "$URL") && grep -q '^HTTP/[0-9.]* [23]' <<<"$h" && ! grep -qi '^x-svc-waiting' <<<"$h"; do sleep 2; done
\`\`\`

Any other host name on ${a.domain} that is not an app gives 404.

## 5. Logs

\`\`\`sh
docker compose -p myapp logs --tail 200 web
curl -sN $CA ${H} "$SVC_URL/sandboxes/$SVC_SANDBOX/logs/stream?tail=50"   # Server-Sent Events, every app
\`\`\`

The stream sends \`event: log\` with JSON data \`{container, service, project, stream, time, line}\`,
\`event: container\` on start/stop, and \`event: end\` when the sandbox goes to sleep. Reconnect with
\`Last-Event-ID\` to resume.

## 6. Files and volumes (the sandbox must be running)

Folders \`/root\` (default), \`/home\`, \`/srv\`, \`/opt\` persist; volume paths come from the volumes route.

\`\`\`sh
${C} ${H} "$SVC_URL/sandboxes/$SVC_SANDBOX/files?path=/root"                          # list
${C} ${H} -X PUT --data-binary @app.conf "$SVC_URL/sandboxes/$SVC_SANDBOX/files/content?path=/srv/app.conf"
${C} ${H} "$SVC_URL/sandboxes/$SVC_SANDBOX/files/text?path=/srv/app.conf"             # {path, text}
${C} ${H} -o out.bin "$SVC_URL/sandboxes/$SVC_SANDBOX/files/content?path=/srv/app.conf"
${C} ${H} -X POST -H 'content-type: application/json' -d '{"path":"/srv/new"}' "$SVC_URL/sandboxes/$SVC_SANDBOX/files/mkdir"
${C} ${H} -X DELETE "$SVC_URL/sandboxes/$SVC_SANDBOX/files?path=/srv/new"
${C} ${H} "$SVC_URL/sandboxes/$SVC_SANDBOX/volumes"        # name, path (/var/lib/docker/volumes/<v>/_data), project, containers
\`\`\`

Uploads belong to root, mode 0644, up to 100 MB by default. Text reads stop at 1 MB.

## 7. Keep it awake, settings

The sandbox sleeps after \`idle_timeout\` without app or engine traffic (default 30 minutes), and an
asleep one is taken down after \`deep_sleep_after\` (data kept; a start takes longer).

\`\`\`sh
${C} -X POST ${H} "$SVC_URL/sandboxes/$SVC_SANDBOX/keep-awake"   # restarts the idle countdown; never wakes it
\`\`\`

\`stops_at\` in the record says when it will stop. Changing \`idle_timeout\`/\`deep_sleep_after\`
(\`PATCH\`, \`{"idle_timeout":"2h"}\`, \`off\` = never) needs the owner's full token or the web UI;
a token limited to one sandbox gets 403.

## 8. Registry

\`\`\`sh
printf %s "$SVC_TOKEN" | docker login ${a.registry} -u agent --password-stdin
docker tag myapp:1.4.2 ${a.registry}/$SVC_SANDBOX/myapp:1.4.2
docker push ${a.registry}/$SVC_SANDBOX/myapp:1.4.2
${C} ${H} "$SVC_URL/sandboxes/$SVC_SANDBOX/registry"      # the secret-scan report
\`\`\`

With the service's own CA (\`service-ca.pem\` in the folder), the engine that pushes must trust it as
\`/etc/docker/certs.d/${a.registry}/ca.crt\`.

Every push is scanned. An image containing an env file or a private key stays private (only you can
pull it) until the flagged version is deleted; anyone can pull an image once all its versions passed.
Keep secrets out of images: pass them at run time (compose \`environment\`, files uploaded to the sandbox).

## 9. Management tool (only when SVC_MANAGER_URL is set)

\`GET $SVC_MANAGER_URL/api/status\` answers JSON when ready (HTML is the waiting page). Send
\`X-API-Key: $SVC_MANAGER_TOKEN\`. Stacks: \`POST /api/stacks/create/standalone/string?endpointId=1\`
\`{name, stackFileContent, env}\`, \`PUT /api/stacks/<Id>?endpointId=1\` \`{stackFileContent, env, prune, pullImage}\`.

## 10. Other ways in

- MCP (Streamable HTTP): ${a.mcp} with \`Authorization: Bearer $SVC_TOKEN\`; tools list_sandboxes, get_sandbox_status,
  start_sandbox, keep_sandbox_awake, run_sandbox_command, read_sandbox_logs, list_sandbox_files, read_sandbox_file, write_sandbox_file, create_sandbox_folder,
  delete_sandbox_file, list_sandbox_volumes.
- API reference: ${a.swagger}
- SSH: \`ssh -o ProxyCommand="openssl s_client -quiet -connect %h:${a.port} -servername %h" root@$SVC_SANDBOX-shell-tcp.${a.domain}\` with a key added in the web UI.

## 11. Errors

Every error is JSON \`{"error": {"code": "SVC_…", "message": "…what to do next"}}\`: 400 bad input,
401 missing/unknown token, 403 not allowed (a limited token creating, deleting or configuring), 404 no such
sandbox (also another user's), 409 wrong state (files while asleep: start first), 410 deleted (archived),
413 too large, 415 not JSON, 422 a file that is not text or too large to read as text, 429 too many
wakes (wait for Retry-After), 502 the sandbox or a file operation failed inside it, 503 busy or the
sandbox \`unavailable\` (wait for Retry-After). Read the message;
it says what to do.
`;
}

export function llmsTxt(a: Addresses): string {
  return `# Sandbox service at ${a.domain}

> Hosted sandboxes, each with its own Docker engine: deploy compose apps with the docker CLI over mutual TLS,
> get HTTPS addresses for published ports, read logs and files; sandboxes sleep when idle and wake on use.

Start from an export folder (svc.env and docker/ certificates, downloaded from the sandbox panel at ${a.site})
and follow the agent guide. Never print or commit SVC_TOKEN or docker/key.pem.

## Docs

- [Agent guide](${a.guide}): svc.env, start, deploy with compose, addresses, logs, files, keep-awake, registry
- [API reference](${a.swagger}): every route of ${a.api}

## Optional

- [MCP endpoint](${a.mcp}): the same operations as MCP tools (Streamable HTTP, bearer token)
`;
}
