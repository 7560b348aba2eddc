import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { EdgeLimits, EdgeTimeouts } from '../limits.ts';

/** Where the data plane keeps its sockets, maps and pages: one private folder per run. */
export interface DataPlaneFiles {
  dir: string;
  /** HAProxy's Runtime API (admin level): never reachable from sandboxes (a unix socket, mode 600). */
  adminSocket: string;
  /** Node's TLS port: every connection that is not a happy app or engine path, with PROXY v2. */
  nodeSocket: string;
  /** Node's app proxy for decrypted requests HAProxy cannot serve (asleep, Host ≠ SNI), with PROXY v2. */
  nodeAppsSocket: string;
  /** Node's registry front for decrypted requests to `registry.<domain>`, with PROXY v2. */
  nodeRegistrySocket: string;
  /** Node's answer to "may this blob request go straight to the upstream registry?" (registry-bypass.lua). */
  nodeRegistryBypassSocket: string;
  /** HAProxy's own TLS-terminating HTTP frontend, fed by the public TCP frontend. */
  appsSocket: string;
  /** HAProxy's TLS-terminating TCP frontend for shell and TCP twin names, fed by the public TCP frontend. */
  tunnelsSocket: string;
  /** SNI → `<address>` of a running sandbox's engine. */
  engineMap: string;
  /** SNI → `<sandbox>|<address>|<port>` of a running app. */
  appsMap: string;
  /** SNI → `<sandbox>|<address>|<port>|shell` or `…|tcp` of a running sandbox's sshd or an app's TCP twin. */
  tunnelsMap: string;
  /** The certificates HAProxy serves for app names (per-name ones are added at run time). */
  crtList: string;
  defaultCert: string;
  waitingPage: string;
  badGatewayPage: string;
  config: string;
}

export function dataPlaneFiles(dir: string): DataPlaneFiles {
  const f = (name: string) => path.join(dir, name);
  return {
    dir,
    adminSocket: f('admin.sock'),
    nodeSocket: f('node.sock'),
    nodeAppsSocket: f('node-apps.sock'),
    nodeRegistrySocket: f('node-registry.sock'),
    nodeRegistryBypassSocket: f('node-registry-bypass.sock'),
    appsSocket: f('apps.sock'),
    tunnelsSocket: f('tunnels.sock'),
    engineMap: f('engine.map'),
    appsMap: f('apps.map'),
    tunnelsMap: f('tunnels.map'),
    crtList: f('certs.list'),
    defaultCert: f('default.pem'),
    waitingPage: f('waiting.http'),
    badGatewayPage: f('bad-gateway.http'),
    config: f('haproxy.cfg'),
  };
}

export interface HaproxyConfigOptions {
  files: DataPlaneFiles;
  /** The service's domain: `registry.<domain>` has its TLS ended here. */
  domain: string;
  /** The public TLS port and its address (default: all interfaces). */
  port: number;
  host?: string;
  /** Port of each sandbox's dockerd (--tlsverify). */
  enginePort: number;
  /** The edge's limits and deadlines (edge/limits.ts), as Node's edge holds them. */
  limits: EdgeLimits;
  timeouts: EdgeTimeouts;
  /**
   * The upstream registry's unix socket: blob bytes the registry front allows go there straight
   * (registry-bypass.lua). Without it every registry request goes to the front.
   */
  registryUpstream?: string;
  /** HAProxy threads (default 1: the figures in docs/data-plane.md are for one, like nginx's one worker). */
  threads?: number;
}

/** The Lua action HAProxy asks the registry front with (loaded from the source tree, as the service runs from it). */
export const REGISTRY_BYPASS_LUA = fileURLToPath(new URL('./registry-bypass.lua', import.meta.url));
/**
 * Names the verdict the front gave HAProxy's question on a request it did not let by, on that
 * request as HAProxy hands it to the front (registry-bypass.lua sets it, HAProxy drops a client's own).
 */
export const REGISTRY_VERDICT_HEADER = 'x-svc-verdict';

/** Stick table names; the activity poller reads them (`show table`). */
export const APP_TABLE = 'be_app';
/**
 * An app's connect: each try bounded, one retry (HAProxy's default is 3 retries of the defaults' connect
 * timeout, 40 s on a machine that drops SYNs; test/edge/haproxy-app-connect.test.ts). 3 s is
 * hundreds of times what a SYN's answer takes on a live machine, loaded or not.
 */
const APP_CONNECT_MS = 3_000;
const APP_RETRIES = 1;
/** Engine connections HAProxy carries, per sandbox (activity, and their place in the sandbox's cap). */
export const ENGINE_TABLE = 'be_engine';
/** TCP twins HAProxy carries, per sandbox (their bytes are activity). */
export const TCP_TABLE = 'be_tunnel';
/**
 * Carried tunnels per sandbox for the cap, besides the engines of ENGINE_TABLE: shells and TCP
 * twins whose TLS `tunnels_tls` ended, in `gpc0` every tunnel Node carries and in `gpc1` the
 * shells and TCP twins among them (RouteMirror).
 */
export const SANDBOX_TUNNELS = 'st_tunnels';
/**
 * `<client address>|<sandbox>` of clients whose certificate the sandbox's dockerd accepted through
 * Node (TlsProof): only their engine connections go through HAProxy, carried from the start.
 */
export const ENGINE_CLIENTS = 'st_engine_clients';
/**
 * The public frontend's backend for each route kind HAProxy carries itself (its counters are the
 * public port's: monitoring/prom-metrics.ts adds them to Node's); every other connection goes to Node (be_node),
 * which counts it.
 */
export const PUBLIC_BACKENDS = {
  'app-http': 'be_apps',
  registry: 'be_registry_tls',
  shell: 'be_shells',
  'app-tcp': 'be_tcp_twins',
  engine: ENGINE_TABLE,
} as const;
/** Blob requests the registry front let go straight to the upstream registry. */
export const REGISTRY_UPSTREAM_BACKEND = 'be_registry_upstream';
/** `<client address>|<sandbox>` → that client's shell and TCP twin connections through HAProxy, from their ClientHello. */
const CLIENT_TUNNELS = 'st_client_tunnels';
/** The same, from the end of their TLS handshake: the difference is what is still in a handshake. */
const CLIENT_CARRIED = 'st_client_carried';
/** `<client address>|<sandbox>` → the engine connections HAProxy carries for that client. */
const CLIENT_ENGINES = 'st_client_engines';

/**
 * The HAProxy 2.6 configuration of the data plane (docs/data-plane.md has the picture):
 *
 * - `public` (mode tcp) owns the port: per-client connection cap, reads the SNI, and sends an
 *   engine name found in the engine map straight to that dockerd (TLS untouched), an app name found
 *   in the app map to `apps_tls`, and everything else, as TLS, to Node's socket with PROXY v2.
 * - `apps_tls` (mode http) ends TLS of apps and of `registry.<domain>` (whose requests go to Node's
 *   registry front as plain HTTP, but a blob's bytes the front allows, asked per request, straight
 *   to the upstream registry), picks an app's address from the map by SNI (`set-dst`), and
 *   sends to Node (decrypted, PROXY v2 with the SNI as authority) what it must not serve itself:
 *   a name no longer in the map (asleep since the connection opened) or Host ≠ SNI (421 there).
 *
 * Routes are never in this file: Node writes the maps through the Runtime API, so nothing reloads.
 */
export function renderHaproxyConfig(o: HaproxyConfigOptions): string {
  return [globalSection(o), publicFrontend(o), routeTables(o), tunnelFrontend(o), appFrontend(o)].join('');
}

/** A duration as HAProxy reads it. */
const ms = (n: number) => `${Math.max(1, Math.round(n))}ms`;

/** The process (its Runtime API socket, the TLS floor, the Lua action) and the defaults every proxy takes: the edge's deadlines. */
function globalSection(o: HaproxyConfigOptions): string {
  const f = o.files;
  return `# Written by the service at each start (edge/dataplane/haproxy-config.ts); routes live in the maps.
global
    log stdout format raw local0 info
    stats socket ${f.adminSocket} mode 600 level admin
    stats timeout 10s
    nbthread ${o.threads ?? 1}
    ssl-default-bind-options ssl-min-ver TLSv1.2
    tune.ssl.default-dh-param 2048
    hard-stop-after 5s
${o.registryUpstream ? `    lua-load "${REGISTRY_BYPASS_LUA}"
` : ''}
defaults
    log global
    option dontlog-normal
    timeout connect ${ms(o.timeouts.upstreamConnectMs)}
    timeout client ${ms(o.timeouts.tunnelIdleMs)}
    timeout server ${ms(o.timeouts.tunnelIdleMs)}
    timeout tunnel ${ms(o.timeouts.tunnelIdleMs)}
    timeout client-fin 30s
    timeout http-request ${ms(o.timeouts.headersMs)}
    timeout http-keep-alive ${ms(o.timeouts.keepAliveMs)}

`;
}

/** The public port (mode tcp): the per-client cap, the SNI, the tunnel and engine caps, and the backend for each route kind. */
function publicFrontend(o: HaproxyConfigOptions): string {
  const f = o.files;
  // no host: every interface, IPv4 and IPv6 (as Node's listen without a host)
  const bind = o.host === undefined ? `:::${o.port} v4v6` : `${o.host.includes(':') ? `ipv6@${o.host}` : o.host}:${o.port}`;
  return `frontend public
    mode tcp
    option tcplog
    bind ${bind}
    stick-table type ipv6 size 1m expire 10m store conn_cur
    tcp-request connection track-sc0 src
    tcp-request connection reject if { sc0_conn_cur gt ${o.limits.connectionsPerClient} }
    tcp-request inspect-delay ${ms(o.timeouts.clientHelloMs)}
    tcp-request content set-var(sess.sni) req.ssl_sni,lower if { req.ssl_hello_type 1 }
    # Tunnels (docs/data-plane.md, rules of the edge): only carried ones take a place of the
    # sandbox's ${o.limits.tunnelsPerSandbox}; one still in its TLS handshake holds one of its client's ${o.limits.tunnelHandshakesPerClient} for that
    # sandbox (st_client_tunnels counts them from here, st_client_carried once tunnels_tls ended TLS).
    tcp-request content set-var(sess.tunnel) var(sess.sni),map(${f.tunnelsMap}) if { var(sess.sni) -m found }
    tcp-request content set-var(sess.sandbox) var(sess.tunnel),field(1,|) if { var(sess.tunnel) -m found }
    tcp-request content set-var(sess.sandbox) "var(sess.sni),regsub('^([a-z0-9-]+)-engine[.].*','\\1')" if !{ var(sess.tunnel) -m found } { var(sess.sni),map(${f.engineMap}) -m found }
    # an IPv4 client of the v4v6 bind is written as Node writes it (edge/services/headers.ts plainIp)
    tcp-request content set-var(sess.client_of) src,regsub(^::ffff:,),concat(|,sess.sandbox) if { var(sess.sandbox) -m found }
    tcp-request content track-sc2 var(sess.client_of) table ${CLIENT_TUNNELS} if { var(sess.tunnel) -m found }
    tcp-request content set-var(sess.carried) var(sess.client_of),table_conn_cur(${CLIENT_CARRIED}) if { var(sess.tunnel) -m found }
    tcp-request content reject if { var(sess.tunnel) -m found } { sc2_conn_cur,sub(sess.carried) gt ${o.limits.tunnelHandshakesPerClient} }
    # An engine's TLS is dockerd's: HAProxy cannot see when it accepted a client. It carries the
    # connections of client addresses dockerd accepted through Node, counted at once, at most
    # ${o.limits.engineTunnelsPerClient} per address (another client behind the owner's NAT shares it); Node takes the others,
    # and counts each once dockerd accepted it.
    tcp-request content set-var(sess.engine) bool(1) if !{ var(sess.tunnel) -m found } { var(sess.client_of),in_table(${ENGINE_CLIENTS}) }
    tcp-request content track-sc2 var(sess.client_of) table ${CLIENT_ENGINES} if { var(sess.engine) -m found }
    tcp-request content reject if { var(sess.engine) -m found } { sc2_conn_cur gt ${o.limits.engineTunnelsPerClient} }
    tcp-request content set-var(sess.engines) var(sess.sandbox),table_conn_cur(${ENGINE_TABLE}) if { var(sess.engine) -m found }
    tcp-request content set-var(sess.node_tunnels) var(sess.sandbox),table_gpc0(${SANDBOX_TUNNELS}) if { var(sess.engine) -m found }
    tcp-request content reject if { var(sess.engine) -m found } { var(sess.sandbox),table_conn_cur(${SANDBOX_TUNNELS}),add(sess.engines),add(sess.node_tunnels) ge ${o.limits.tunnelsPerSandbox} }
    tcp-request content accept if { req.ssl_hello_type 1 }
    use_backend ${PUBLIC_BACKENDS['app-tcp']} if { var(sess.tunnel),field(4,|) -m str tcp }
    use_backend ${PUBLIC_BACKENDS.shell} if { var(sess.tunnel) -m found }
    use_backend ${PUBLIC_BACKENDS.engine} if { var(sess.engine) -m found }
    use_backend ${PUBLIC_BACKENDS['app-http']} if { req.ssl_sni,lower,map(${f.appsMap}) -m found }
    use_backend ${PUBLIC_BACKENDS.registry} if { req.ssl_sni,lower -m str registry.${o.domain} }
    default_backend be_node

`;
}

/** The engine passthrough, the stick tables that count tunnels per client and sandbox, and the relays to the shell and TCP twin frontend. */
function routeTables(o: HaproxyConfigOptions): string {
  const f = o.files;
  return `backend ${ENGINE_TABLE}
    mode tcp
    option splice-auto
    stick-table type string len 64 size 100k expire 1h store conn_cur,conn_cnt,bytes_out_cnt
    tcp-request content track-sc1 var(sess.sandbox)
    tcp-request content set-dst var(sess.sni),map(${f.engineMap})
    server engine 0.0.0.0:${o.enginePort}

backend ${ENGINE_CLIENTS}
    stick-table type string len 128 size 100k expire 1h store gpt0

backend ${CLIENT_TUNNELS}
    stick-table type string len 128 size 1m expire 10m store conn_cur

backend ${CLIENT_CARRIED}
    stick-table type string len 128 size 1m expire 10m store conn_cur

backend ${CLIENT_ENGINES}
    stick-table type string len 128 size 100k expire 1h store conn_cur

backend ${SANDBOX_TUNNELS}
    stick-table type string len 64 size 100k expire 1h store conn_cur,gpc0,gpc1

# shells and TCP twins apart, apps and the registry apart: one backend per route kind, for the metrics
backend ${PUBLIC_BACKENDS.shell}
    mode tcp
    server inner unix@${f.tunnelsSocket} send-proxy-v2

backend ${PUBLIC_BACKENDS['app-tcp']}
    mode tcp
    server inner unix@${f.tunnelsSocket} send-proxy-v2

`;
}

/** Shells and TCP twins: TLS ended with the name's certificate, their caps, then raw TCP to the sandbox. */
function tunnelFrontend(o: HaproxyConfigOptions): string {
  const f = o.files;
  return `# Shell and TCP twins: TLS ends here with the name's certificate, then raw TCP to the sandbox. A
# name that left the map during the handshake (its sandbox started sleeping) is reset: Node resets
# an asleep shell, and wakes an asleep TCP twin on the retry.
frontend tunnels_tls
    mode tcp
    option tcplog
    bind unix@${f.tunnelsSocket} mode 600 accept-proxy ssl crt-list ${f.crtList}
    # HAProxy 2.6 bounds a TLS handshake by the client timeout (2.8 has client-hs): a stalled one
    # would hold its client's place for the sandbox for the tunnel idle. Once carried, the
    # connection is a tunnel, and the tunnel timeout takes over.
    timeout client ${ms(o.timeouts.handshakeMs)}
    tcp-request content set-var(sess.route) ssl_fc_sni,lower,map(${f.tunnelsMap})
    tcp-request content reject unless { var(sess.route) -m found }
    # TLS ended: carried. It leaves its client's handshake places for the sandbox and takes one of
    # its client's ${o.limits.shellTunnelsPerClient} carried ones, one of the ${o.limits.shellTunnelsPerSandbox} of the sandbox's places shells and TCP twins
    # share (this TLS asks no credential) and one of the sandbox's.
    tcp-request content set-var(sess.sandbox) var(sess.route),field(1,|)
    tcp-request content track-sc0 src,regsub(^::ffff:,),concat(|,sess.sandbox) table ${CLIENT_CARRIED}
    tcp-request content reject if { sc0_conn_cur gt ${o.limits.shellTunnelsPerClient} }
    tcp-request content track-sc2 var(sess.sandbox) table ${SANDBOX_TUNNELS}
    tcp-request content set-var(sess.node_shells) sc2_get_gpc1
    tcp-request content reject if { sc2_conn_cur,add(sess.node_shells) gt ${o.limits.shellTunnelsPerSandbox} }
    tcp-request content set-var(sess.engines) var(sess.sandbox),table_conn_cur(${ENGINE_TABLE})
    tcp-request content set-var(sess.node_tunnels) sc2_get_gpc0
    tcp-request content reject if { sc2_conn_cur,add(sess.engines),add(sess.node_tunnels) gt ${o.limits.tunnelsPerSandbox} }
    default_backend ${TCP_TABLE}

backend ${TCP_TABLE}
    mode tcp
    option splice-auto
    stick-table type string len 64 size 100k expire 1h store conn_cur,conn_cnt,bytes_in_cnt,bytes_out_cnt
    tcp-request content track-sc1 var(sess.route),field(1,|) if { var(sess.route),field(4,|) -m str tcp }
    tcp-request content set-dst var(sess.route),field(2,|)
    tcp-request content set-dst-port var(sess.route),field(3,|)
    server sandbox 0.0.0.0:0

`;
}

/** Apps and the registry: TLS ended, each request to its app (the map), to Node, or (a blob the front allowed) to the upstream. */
function appFrontend(o: HaproxyConfigOptions): string {
  const f = o.files;
  return `backend ${PUBLIC_BACKENDS['app-http']}
    mode tcp
    server inner unix@${f.appsSocket} send-proxy-v2

backend ${PUBLIC_BACKENDS.registry}
    mode tcp
    server inner unix@${f.appsSocket} send-proxy-v2

backend be_node
    mode tcp
    server node unix@${f.nodeSocket} send-proxy-v2

frontend apps_tls
    mode http
    # httplog's fields, the request line without its query string: tokens and keys travel there, and
    # the service never logs one (the edge in Node logs no app URL at all)
    log-format "%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %CC %CS %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %{+Q}HM %{+Q}HP %{+Q}HV"
    bind unix@${f.appsSocket} mode 600 accept-proxy ssl crt-list ${f.crtList} alpn http/1.1
    # The client timeout bounds the TLS handshake here too (see tunnels_tls), and a client that reads
    # nothing of an answer: the body deadline, not the handshake's, lest a client whose disk is slow
    # to take a layer be cut. Headers and keep-alive have their own; a websocket is a tunnel.
    timeout client ${ms(o.timeouts.bodyIdleMs)}
    http-request set-var(txn.sni) ssl_fc_sni,lower
    http-request set-var(txn.host) req.hdr(host),lower,field(1,:)
    http-request set-var(txn.route) var(txn.sni),map(${f.appsMap})
    acl host_is_sni var(txn.host),strcmp(txn.sni) eq 0
    acl registry var(txn.sni) -m str registry.${o.domain}
${o.registryUpstream ? `    # a blob's bytes go straight to the upstream registry when the front, asked per request, says so
    http-request del-header ${REGISTRY_VERDICT_HEADER} if registry
    http-request lua.svc_registry_bypass unix@${f.nodeRegistryBypassSocket} if registry { method GET HEAD PATCH PUT } { path_reg ^/v2/.+/blobs/ } { req.fhdr_cnt(authorization) le 1 }
    use_backend ${REGISTRY_UPSTREAM_BACKEND} if registry { var(txn.registry_bypass) -m bool }
` : ''}    use_backend be_node_registry if registry
    use_backend be_node_apps unless host_is_sni { var(txn.route) -m found }
    default_backend ${APP_TABLE}

backend ${APP_TABLE}
    mode http
    stick-table type string len 64 size 100k expire 1h store http_req_cnt,bytes_in_cnt,bytes_out_cnt
    http-request track-sc2 var(txn.route),field(1,|)
    http-request set-dst var(txn.route),field(2,|)
    http-request set-dst-port var(txn.route),field(3,|)
    # X-Forwarded-* are ours alone, a client's own copies are dropped (as edge/services/headers.ts)
    http-request del-header forwarded
    http-request del-header x-real-ip
    http-request set-header x-forwarded-for %[src]
    http-request set-header x-forwarded-proto https
    http-request set-header x-forwarded-host %[req.hdr(host)]
    http-request set-header x-forwarded-port ${o.port}
    # The edge's body deadline, as far as HAProxy 2.6 can hold it: it lifts the client timeout while
    # a forwarded request waits for the app's answer (stream.c, so slow apps are not blamed on
    # clients), so a client that announced a body and went silent would hold the app's connection
    # for the tunnel idle. The body's first 16 KiB (or all of a shorter one) are awaited here,
    # before the app is connected: 408 if they take longer. A stall after them is not cut.
    http-request wait-for-body time ${ms(o.timeouts.bodyIdleMs)} at-least 16k
    errorfile 503 ${f.waitingPage}
    errorfile 502 ${f.badGatewayPage}
    errorfile 504 ${f.badGatewayPage}
    # An app's machine answers a SYN in milliseconds (its kernel, whatever the app does), so a connect
    # this slow means the machine is gone while its route is still mapped (a cluster member lost before
    # its sandbox is marked unavailable): one retry, each try bounded, and the client gets the waiting
    # page (503) within seconds, not after the defaults' 4 tries of the edge's connect timeout (40 s).
    retries ${APP_RETRIES}
    timeout connect ${ms(APP_CONNECT_MS)}
    server app 0.0.0.0:0

backend be_node_apps
    mode http
    server node unix@${f.nodeAppsSocket} send-proxy-v2 proxy-v2-options authority

# Registry: TLS ends here, Node's front (auth, manifests) gets plain HTTP; layers of hundreds of MB
backend be_node_registry
    mode http
    server node unix@${f.nodeRegistrySocket} send-proxy-v2
${o.registryUpstream ? `
# Blob bytes the front allowed: to the upstream registry, which has no auth of its own
backend ${REGISTRY_UPSTREAM_BACKEND}
    mode http
    # the credentials the front checked stop here: the upstream needs none
    http-request del-header authorization
    # The edge's body deadline for uploads: bytes written to the upstream restart this timer, so an
    # upload is cut (504) once its client sent nothing for that long, and a steady one of any length
    # is not; a client slow to read a pull is not cut either (HAProxy stops reading the upstream).
    timeout server ${ms(o.timeouts.bodyIdleMs)}
    server registry unix@${o.registryUpstream}
` : ''}`;
}
