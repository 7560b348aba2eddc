import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import websocket from '@fastify/websocket';
import { Type } from '@sinclair/typebox';
import { errors } from '../../core/errors.ts';
import type { SandboxCommands } from '../../exec/index.ts';
import type { Store } from '../../store/index.ts';
import { authorizeSandbox } from '../../accounts/index.ts';
import { errorResponses, SandboxParams } from '../schemas/common.ts';

export interface TerminalRoutesOptions {
  store: Store;
  commands: SandboxCommands;
  /** `https://<domain>[:port]`: the only Origin a browser's terminal may come from. */
  siteOrigin: string;
}

/** Client messages: keys typed or pasted, and the terminal's size. */
type ClientMessage = { type: 'input'; data: string } | { type: 'resize'; cols: number; rows: number };

const MAX_SIZE = 1000;
const validSize = (n: unknown): n is number => Number.isInteger(n) && (n as number) > 0 && (n as number) <= MAX_SIZE;

/**
 * The web UI's terminal (as Coder's web terminal): a websocket on the same origin, a login shell
 * as root in the sandbox on a TTY. Authenticated like every route (the session cookie from the UI,
 * whose cross-site check refuses a foreign Origin); a cookie-authenticated upgrade must carry the
 * UI's own Origin (browsers always send it on websockets). Output goes out as binary frames; the
 * client sends JSON text frames (`input`, `resize`). An asleep sandbox is woken when the terminal
 * (re)connects; typing counts as activity.
 */
export const terminalRoutes: FastifyPluginAsyncTypebox<TerminalRoutesOptions> = async (app, { store, commands, siteOrigin }) => {
  await app.register(websocket, { options: { maxPayload: 1024 * 1024 } });
  app.get('/sandboxes/:name/terminal', {
    websocket: true,
    schema: {
      tags: ['exec'], params: SandboxParams,
      summary: 'A shell on a terminal in the sandbox (websocket)',
      description: 'Upgrade to a websocket. Send JSON text frames `{"type":"input","data":"ls\\r"}` and `{"type":"resize","cols":120,"rows":30}`; the terminal\'s output comes as binary frames. The first resize may be given as query `cols`/`rows`.',
      querystring: Type.Object({
        cols: Type.Optional(Type.String({ pattern: '^[0-9]{1,4}$' })),
        rows: Type.Optional(Type.String({ pattern: '^[0-9]{1,4}$' })),
      }, { additionalProperties: false }),
      response: { 101: { description: 'Switching to a websocket' }, ...errorResponses(401, 403, 404, 410, 503) },
    },
    preValidation: async (request) => {
      if (request.principal.session && request.headers.origin !== siteOrigin) throw new errors.Forbidden(`a terminal opened with the session cookie must come from the web UI at ${siteOrigin}`);
      await authorizeSandbox(store, request.principal, request.params.name, 'use');
    },
  }, async (socket, request) => {
    const size = { cols: Number(request.query.cols ?? 80), rows: Number(request.query.rows ?? 24) };
    if (!validSize(size.cols) || !validSize(size.rows)) return socket.close(1008, 'cols and rows must be 1-1000');
    // keys typed before the shell is there are kept, not lost
    const early: ClientMessage[] = [];
    const onEarly = (data: Buffer) => { try { early.push(JSON.parse(data.toString('utf8'))); } catch { /* not ours */ } };
    socket.on('message', onEarly);
    let term: Awaited<ReturnType<SandboxCommands['terminal']>>;
    try {
      term = await commands.terminal(request.params.name, size);
    } catch (err) {
      request.log.warn({ err, sandbox: request.params.name }, 'terminal: the shell did not start');
      return socket.close(1011, 'the shell could not be started; try again');
    }
    socket.off('message', onEarly);
    const handle = (msg: ClientMessage) => {
      if (msg?.type === 'input' && typeof msg.data === 'string') {
        term.typed();
        term.stream.write(msg.data);
      } else if (msg?.type === 'resize' && validSize(msg.cols) && validSize(msg.rows)) {
        term.resize({ cols: msg.cols, rows: msg.rows }).catch(() => undefined);
      }
    };
    early.forEach(handle);
    socket.on('message', (data: Buffer) => {
      let msg: ClientMessage;
      try { msg = JSON.parse(data.toString('utf8')); } catch { return; }
      handle(msg);
    });
    term.stream.on('data', (chunk: Buffer) => {
      socket.send(chunk, { binary: true });
      // a browser that reads slower than the shell writes holds the shell back
      if (socket.bufferedAmount > 1024 * 1024) {
        term.stream.pause();
        const resume = setInterval(() => { if (socket.bufferedAmount < 256 * 1024 || socket.readyState !== socket.OPEN) { clearInterval(resume); term.stream.resume(); } }, 50);
      }
    });
    term.stream.on('end', () => socket.close(1000, 'the shell ended'));
    term.stream.on('error', () => socket.close(1011, 'the connection to the shell broke'));
    socket.on('close', () => term.stream.destroy());
  });
};
