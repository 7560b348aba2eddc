/**
 * Labels Docker Compose puts on a service's containers: read by the lifecycle's app table, the
 * API's container list, the files, the logs and the management tool (which is bundled on its own,
 * so it takes these from here rather than from the lifecycle).
 */
export const COMPOSE_PROJECT = 'com.docker.compose.project';
export const COMPOSE_SERVICE = 'com.docker.compose.service';
