/**
 * The edge's question to the registry front when HAProxy carries a blob's bytes itself
 * (docs/data-plane.md): declared here, on the edge's side, and answered by registry/front.ts,
 * as EdgeBackend is answered by the lifecycle.
 *
 * mayBypass's answer: let by, or not; then `verdict` names the verdict the front keeps for that
 * request, which comes to it next (REGISTRY_VERDICT_HEADER), so it is not decided twice.
 */
export interface RegistryBypassAnswer {
  bypass: boolean;
  verdict?: string;
}
