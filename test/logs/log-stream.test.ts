import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';
import { once } from 'node:events';
import { after, before, describe, it } from 'node:test';
import { EventSource } from 'eventsource';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';

const FIXTURE = path.resolve('fixtures/busybox');

interface LogEvent { id: string; container: string; container_id: string; service: string | null; project: string | null; stream: string; time: string; line: string }

/** GET logs/stream with a real EventSource client, against a real sandbox whose apps log. */
describe('log stream (SSE)', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let limited: string;
  let name: string;
  let cli: EngineCli;
  const sources: EventSource[] = [];

  const open = (query = '', headers: Record<string, string> = {}) => {
    const logs: LogEvent[] = [];
    const containers: Array<{ container: string; action: string }> = [];
    const ends: Array<{ reason: string; status: string }> = [];
    const ids: string[] = [];
    const es = new EventSource(`${t.url}/api/sandboxes/${name}/logs/stream${query}`, {
      fetch: (input, init) => fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), ...headers, authorization: `Bearer ${limited}` } }),
    });
    es.addEventListener('log', (e) => { logs.push(JSON.parse(e.data)); ids.push(e.lastEventId); });
    es.addEventListener('container', (e) => containers.push(JSON.parse(e.data)));
    es.addEventListener('end', (e) => { ends.push(JSON.parse(e.data)); es.close(); });
    sources.push(es);
    return { es, logs, containers, ends, ids };
  };
  const numbers = (logs: LogEvent[], container: string) => logs.filter((l) => l.container === container && l.stream === 'stdout').map((l) => Number(l.line.split(' ')[1]));

  before(async () => {
    t = await startTestService({ sseHeartbeatMs: 300 });
    alice = await t.user('alice');
    const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `logs-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    name = res.body.name;
    limited = await t.limitedToken(alice.id, name);
    cli = new EngineCli(res.body.engine_access.host, (await t.service.lifecycle.status(name)).address!, 2376, res.body);
    await cli.docker(['build', '-q', '-t', 'busybox-app', FIXTURE]);
    await cli.docker(['run', '-d', '--name', 'demo-web-1', '--label', 'com.docker.compose.project=demo', '--label', 'com.docker.compose.service=web',
      'busybox-app', 'sh', '-c', 'i=0; while true; do echo "tick $i"; echo "warn $i" >&2; i=$((i+1)); sleep 0.1; done']);
  });
  after(async () => {
    for (const es of sources) es.close();
    cli?.dispose();
    await t?.close();
  });

  it('streams every app\'s lines with container, service, project, stream and time, joined by an app that starts later', async () => {
    const s = open();
    await eventually(async () => numbers(s.logs, 'demo-web-1').length >= 5, 'lines of the first app', 20_000, 50);
    const line = s.logs.find((l) => l.container === 'demo-web-1' && l.stream === 'stdout')!;
    assert.equal(line.service, 'web');
    assert.equal(line.project, 'demo');
    assert.match(line.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z$/);
    assert.match(line.line, /^tick \d+$/);
    assert.equal(line.container_id.length, 12);
    assert.ok(s.logs.some((l) => l.container === 'demo-web-1' && l.stream === 'stderr' && /^warn \d+$/.test(l.line)), 'stderr lines too');

    await cli.docker(['run', '-d', '--name', 'late', 'busybox-app', 'sh', '-c', 'echo hello from late; exec sleep 100000']);
    await eventually(async () => s.logs.some((l) => l.container === 'late' && l.line === 'hello from late'), 'the later app', 20_000, 50);
    const late = s.logs.find((l) => l.container === 'late')!;
    assert.equal(late.service, null);
    assert.equal(late.project, null);
    assert.ok(s.containers.some((c) => c.container === 'late' && c.action === 'start'), 'a container event for the start');

    const nums = numbers(s.logs, 'demo-web-1');
    assert.deepEqual(nums, Array.from({ length: nums.length }, (_, i) => nums[0]! + i), 'no gaps or repeats within a container');
    const sorted = [...s.ids].sort((a, b) => (BigInt(a.split('-')[0]!) < BigInt(b.split('-')[0]!) ? -1 : BigInt(a.split('-')[0]!) > BigInt(b.split('-')[0]!) ? 1 : 0));
    assert.deepEqual(s.ids.map((id) => id.split('-')[0]), sorted.map((id) => id.split('-')[0]), 'events come in timestamp order');
    s.es.close();
  });

  it('resumes after Last-Event-ID with no gap and no repeat', async () => {
    const first = open();
    await eventually(async () => numbers(first.logs, 'demo-web-1').length >= 3, 'some lines', 20_000, 50);
    first.es.close();
    const lastIndex = first.logs.map((l) => l.container === 'demo-web-1' && l.stream === 'stdout').lastIndexOf(true);
    const lastId = first.ids[lastIndex]!;
    const lastNumber = numbers(first.logs, 'demo-web-1').at(-1)!;
    // the app keeps logging while nobody listens: ten lines more, as its engine has them
    await eventually(async () => Number(/tick (\d+)/.exec((await cli.docker(['logs', '--tail', '2', 'demo-web-1'])).stdout)?.[1] ?? -1) >= lastNumber + 10, 'lines written while nobody listens', 20_000, 100);
    const second = open('', { 'last-event-id': lastId });
    await eventually(async () => numbers(second.logs, 'demo-web-1').length >= 20, 'resumed lines', 20_000, 50);
    const nums = numbers(second.logs, 'demo-web-1');
    assert.equal(nums[0], lastNumber + 1, `resumes right after ${lastNumber}`);
    assert.deepEqual(nums, Array.from({ length: nums.length }, (_, i) => lastNumber + 1 + i));
    assert.ok(!second.logs.some((l) => l.container === 'late'), 'nothing from before the id');
    second.es.close();
  });

  it('starts at `since`, including apps that have stopped', async () => {
    const since = new Date(Date.now() - 120_000).toISOString();
    const s = open(`?since=${encodeURIComponent(since)}`);
    await eventually(async () => s.logs.some((l) => l.container === 'late' && l.line === 'hello from late'), 'old line of late', 20_000, 50);
    assert.equal(numbers(s.logs, 'demo-web-1')[0], 0, 'from the first line');
    s.es.close();
    const bad = await t.api('GET', `/api/sandboxes/${name}/logs/stream?since=yesterday`, limited);
    assert.equal(bad.status, 400);
    const badId = await fetch(`${t.url}/api/sandboxes/${name}/logs/stream`, { headers: { authorization: `Bearer ${limited}`, 'last-event-id': 'nope' } });
    assert.equal(badId.status, 400);
    await badId.body?.cancel();
  });

  it('sends heartbeats on a quiet stream and documents the event format in OpenAPI', async () => {
    await cli.docker(['rm', '-f', 'demo-web-1']);
    const res = await fetch(`${t.url}/api/sandboxes/${name}/logs/stream`, { headers: { authorization: `Bearer ${limited}` } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const reader = res.body!.getReader();
    let text = '';
    const deadline = Date.now() + 5000;
    while (!/: heartbeat/.test(text) && Date.now() < deadline) text += new TextDecoder().decode((await reader.read()).value);
    await reader.cancel();
    assert.match(text, /: heartbeat \d{4}-/);
    const doc = (await t.api('GET', '/api/swagger/json', undefined)).body;
    const op = doc.paths['/api/sandboxes/{name}/logs/stream'].get;
    for (const word of ['event: log', 'Last-Event-ID', 'container', 'service', 'project', 'stream', 'time', '`end`']) {
      assert.ok(op.description.includes(word.replace('event: log', '`log`')), `description mentions ${word}`);
    }
  });

  it('stops following for a client that does not read once 1 MiB waits, and goes on without gap once it reads', async () => {
    // 400 lines of 60 KiB (24 MB): far more than the socket buffers hold for a client that reads nothing.
    const LINES = 400;
    const url = new URL(t.url);
    const accepted: net.Socket[] = [];
    const onConnection = (s: net.Socket) => accepted.push(s);
    t.service.api.server.on('connection', onConnection);
    const socket = net.connect(Number(url.port), url.hostname);
    await once(socket, 'connect');
    let text = '';
    socket.on('data', (c: Buffer) => { text += c.toString('latin1'); });
    const flood = `echo ready; while [ ! -f /go ]; do sleep 0.1; done; i=0; while [ $i -lt ${LINES} ]; do printf "flood $i "; head -c 61440 /dev/zero | tr '\\0' a; echo; i=$((i+1)); done; touch /done; sleep 3600`;
    await cli.docker(['run', '-d', '--name', 'flood', 'busybox-app', 'sh', '-c', flood]);
    socket.write(`GET /api/sandboxes/${name}/logs/stream?tail=1 HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${limited}\r\n\r\n`);
    await eventually(async () => /"line":"ready"/.test(text), 'a first line');
    t.service.api.server.off('connection', onConnection);
    const served = accepted.find((s) => s.remotePort === socket.localPort);
    assert.ok(served, 'found the service side of the connection');
    socket.pause(); // from now on the client reads nothing
    await cli.docker(['exec', 'flood', 'touch', '/go']);
    await eventually(async () => (await cli.docker(['exec', 'flood', 'ls', '/done'])).stdout.includes('/done'), 'the flood written', 60_000, 500);
    await new Promise((r) => setTimeout(r, 1_000)); // the last lines are released
    assert.ok(served!.writableLength < 8 * 1024 * 1024, `${served!.writableLength} bytes wait in the service for a client that does not read`);

    socket.resume();
    const flooded = await eventually(async () => {
      const got = [...text.matchAll(/^data: \{.*"line":"flood (\d+) [^"]*"\}$/gm)].map((m) => Number(m[1]));
      return got.at(-1) === LINES - 1 ? got : null;
    }, 'every flood line once the client reads', 60_000, 500);
    socket.destroy();
    assert.deepEqual(flooded, Array.from({ length: LINES }, (_, i) => i), 'in order, no gap, no repeat');
    await cli.docker(['rm', '-f', 'flood']);
  });

  it("cuts off a command that prints without end (the runtime exec's run keeps at most 4 MiB)", async () => {
    const exec = t.service.runtime.exec;
    await assert.rejects(exec.run(name, ['sh', '-c', 'head -c 64000000 /dev/zero']), /wrote more than 4 MiB/);
    assert.equal((await exec.run(name, ['echo', 'fine'])).stdout.toString(), 'fine\n');
  });

  it('ends with an end event when the sandbox goes to sleep, and answers 409 while asleep', async () => {
    const s = open();
    await new Promise((r) => setTimeout(r, 500));
    await t.service.lifecycle.sleep(name, 'test');
    await eventually(async () => s.ends.length === 1, 'end event', 30_000, 50);
    assert.equal(s.ends[0]!.reason, 'asleep');
    assert.equal(s.ends[0]!.status, 'exited');
    const res = await t.api('GET', `/api/sandboxes/${name}/logs/stream`, limited);
    assert.equal(res.status, 409);
    assert.match(res.body.error.message, /start it first/);
  });
});
