import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { hashPassword } from '../../core/passwords.ts';
import { call, docker, projectContainers, removeProjects, sleepers, waitForStatus } from './tool.ts';

/** The tool's image as setup builds it (scripts/build-manager-image.sh), run on the host engine. */
const IMAGE = process.env.SVC_MANAGER_IMAGE || 'svc-manager:latest';
const id = `mgri${randomBytes(3).toString('hex')}`;
const password = randomBytes(12).toString('base64url');
let url: string;

before(async () => {
  await docker([
    'run', '-d', '--name', id, '--label', `svc.test=${id}`,
    '-v', '/var/run/docker.sock:/var/run/docker.sock', '-v', `${id}-data:/data`,
    '-e', `MANAGER_ADMIN_PASSWORD_HASH=${await hashPassword(password)}`,
    '-p', '127.0.0.1::9000', IMAGE,
  ]);
  url = `http://${await docker(['port', id, '9000/tcp'])}`;
  await waitForStatus(url);
});

after(async () => {
  await docker(['rm', '-f', id]).catch(() => undefined);
  await docker(['volume', 'rm', `${id}-data`]).catch(() => undefined);
  await removeProjects(id);
});

describe('the management tool image', () => {
  it('carries the label the service recognises it by', async () => {
    assert.equal(await docker(['inspect', '-f', '{{ index .Config.Labels "svc.tool" }}', id]), 'manager');
  });

  it('signs in, deploys a stack with its own compose binary, and passes engine calls through', async () => {
    const jwt = (await call(url, 'POST', '/api/auth', { body: { username: 'admin', password } })).body.jwt;
    assert.equal(typeof jwt, 'string');
    const made = await call(url, 'POST', '/api/stacks/create/standalone/string?endpointId=1', { jwt, body: { name: id, stackFileContent: sleepers('web') } });
    assert.equal(made.status, 200, made.text);
    assert.equal(made.body.ProjectPath, `/data/compose/${made.body.Id}`);
    assert.deepEqual((await projectContainers(id)).map((c) => c.state), ['running']);
    const list = await call(url, 'GET', '/api/endpoints/1/docker/containers/json', { jwt });
    assert.ok(list.body.some((c: { Names: string[] }) => c.Names.includes(`/${id}-web-1`)));
    assert.equal((await call(url, 'DELETE', `/api/stacks/${made.body.Id}`, { jwt })).status, 204);
    assert.deepEqual(await projectContainers(id), []);
  });

  it('keeps its state in the data volume, 0600, across a restart', async () => {
    assert.equal(await docker(['exec', id, '/usr/local/bin/node', '-e', 'console.log((require("fs").statSync("/data/manager.json").mode & 0o777).toString(8))']), '600');
    const before = (await call(url, 'GET', '/api/status')).body.InstanceID;
    await docker(['restart', '-t', '5', id]);
    url = `http://${await docker(['port', id, '9000/tcp'])}`;
    assert.equal((await waitForStatus(url)).InstanceID, before);
  });
});
