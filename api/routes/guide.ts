import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { Addresses } from '../../core/addresses.ts';
import { agentGuide, llmsTxt } from '../../export/index.ts';

/** The agent guide (`SVC_AGENT_GUIDE`) and /llms.txt, open to anyone: they hold addresses, no secrets. */
export const guideRoutes: FastifyPluginAsyncTypebox<{ addresses: Addresses }> = async (app, { addresses }) => {
  const guide = agentGuide(addresses);
  const llms = llmsTxt(addresses);
  app.get('/agent-guide.md', {
    schema: { tags: ['guide'], summary: 'How a coding agent uses a sandbox from its export folder (Markdown)', produces: ['text/markdown'], response: { 200: Type.String() } },
  }, async (_request, reply) => reply.type('text/markdown; charset=utf-8').header('cache-control', 'no-cache').send(guide));
  app.get('/llms.txt', {
    schema: { tags: ['guide'], summary: 'llms.txt: where agents start (points to the agent guide)', produces: ['text/plain'], response: { 200: Type.String() } },
  }, async (_request, reply) => reply.type('text/plain; charset=utf-8').header('cache-control', 'no-cache').send(llms));
};
