import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { Type } from '@sinclair/typebox';
import { errorResponses } from '../schemas/common.ts';
import { buildMcpServer, type McpDeps } from './tools.ts';

/** JSON-RPC bodies carry whole text files for write_sandbox_file. */
const MCP_BODY_LIMIT = 16 * 1024 * 1024;

/**
 * MCP over Streamable HTTP at /api/mcp, stateless (a server and transport per request, JSON
 * responses). The bearer token is checked by the API's auth plugin like on every route; the
 * tools then act as that caller (a limited token: only its sandbox).
 */
export const mcpRoutes: FastifyPluginAsyncTypebox<McpDeps> = async (app, deps) => {
  const description = 'Tools: list_sandboxes, get_sandbox_status, start_sandbox, keep_sandbox_awake, fork_sandbox, run_sandbox_command, read_sandbox_logs, list_sandbox_files, read_sandbox_file, write_sandbox_file, create_sandbox_folder, delete_sandbox_file, list_sandbox_volumes. Send `Authorization: Bearer <svc_ token>` and `Accept: application/json, text/event-stream`.';
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const principal = request.principal;
    const server = buildMcpServer(deps, principal, (action, entry) => request.audit(action, entry));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    reply.hijack();
    reply.raw.on('close', () => {
      void transport.close();
      void server.close();
    });
    Object.assign(request.raw, { auth: { token: '[svc token]', clientId: principal.user.id, scopes: [], extra: { sandbox: principal.sandbox } } });
    await server.connect(transport);
    await transport.handleRequest(request.raw, reply.raw, request.body);
  };
  app.post('/mcp', {
    bodyLimit: MCP_BODY_LIMIT,
    schema: {
      tags: ['mcp'],
      summary: 'Model Context Protocol (Streamable HTTP, stateless): JSON-RPC requests',
      description,
      body: Type.Unknown(),
      response: { 200: { description: 'JSON-RPC response' }, ...errorResponses(401) },
    },
  }, handler);
  app.route({
    method: ['GET', 'DELETE'],
    url: '/mcp',
    schema: {
      tags: ['mcp'],
      summary: 'Model Context Protocol: no sessions here (stateless), so the transport answers 405',
      response: { 405: { description: 'JSON-RPC error' }, ...errorResponses(401) },
    },
    handler,
  });
};
