/**
 * The edge: the service's one public TLS port (design.md, "The parts").
 *
 * Folders follow a connection's path, Traefik-like (edge.ts builds the parts, dispatch.ts hands
 * each connection to what serves its route):
 * - listener/  the TLS port (SNI peek with a deadline, bytes put back) and the port-80 redirect
 * - router/    host name → route kind
 * - services/  HTTP reverse proxy, TCP forward (passthrough or after TLS), TLS termination,
 *              tunnel caps, activity metering, wake coalescing
 * - pages/     the pages the edge answers itself (waiting, 404, 429, loopback-only, …)
 * - certs/     the service CA and the certificates the edge serves
 * - dataplane/ HAProxy in front: its configuration, process, and the route mirror (the provider
 *              of its maps: what the backend resolves and tells)
 */
export { startEdge, DEFAULT_TIMEOUTS, type Edge, type EdgeTimeouts, type StartEdgeOptions, type HttpHandler } from './edge.ts';
export type { AppRoute, EdgeBackend, ResolvedApp, ResolvedSandbox, SandboxStatus, WakeUnderWay } from './backend.ts';
export { TOO_MANY_WAKES } from './backend.ts';
export { routeFor, type Route } from './router/host-router.ts';
export { serviceCaPem, loadEdgeCertificates, wildcardAccepted, type EdgeCertificates, type CertificateMode } from './certs/edge-certificates.ts';
export { CA_FILE, caDir, loadOrCreateServiceCa } from './certs/service-ca.ts';
export { UNAVAILABLE_HEADER, WAITING_HEADER } from './pages/pages.ts';
export { requireHaproxy, findHaproxy, HAPROXY_SETUP } from './dataplane/haproxy-process.ts';
export { REGISTRY_VERDICT_HEADER } from './dataplane/haproxy-config.ts';
export type { RegistryBypassAnswer } from './registry-bypass.ts';
export { APP_ENTRY_PATH, APP_PASS_COOKIE, visibilityOf, type AppAccess, type AppAccessAnswer, type AppAccessQuestion, type AppVisibility } from './app-access.ts';
