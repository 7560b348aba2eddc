import type { Config } from './config.ts';

/** The public addresses of this deployment, as users, agents and the guide write them. */
export interface Addresses {
  domain: string;
  port: number;
  /** `https://<domain>[:port]`: the web UI. */
  site: string;
  /** `{base_url}` of the spec: `<site>/api`. */
  api: string;
  guide: string;
  llms: string;
  swagger: string;
  mcp: string;
  /** Registry host for `docker login` / image names: `registry.<domain>[:port]`. */
  registry: string;
}

/**
 * `localhost` and `*.localhost`: names of a machine itself (RFC 6761), which some systems resolve
 * on their own and no DNS record serves. The CLI bundles this too (keep it free of imports).
 */
export function isLocalDomain(domain: string): boolean {
  return domain === 'localhost' || domain.endsWith('.localhost');
}

/** `https://<host>` with the port when it is not 443. */
export function httpsUrl(host: string, port: number): string {
  return `https://${host}${port === 443 ? '' : `:${port}`}`;
}

export function addressesOf(config: Pick<Config, 'domain' | 'httpsPort'>): Addresses {
  const site = httpsUrl(config.domain, config.httpsPort);
  return {
    domain: config.domain,
    port: config.httpsPort,
    site,
    api: `${site}/api`,
    guide: `${site}/agent-guide.md`,
    llms: `${site}/llms.txt`,
    swagger: `${site}/api/swagger`,
    mcp: `${site}/api/mcp`,
    registry: `registry.${config.domain}${config.httpsPort === 443 ? '' : `:${config.httpsPort}`}`,
  };
}
