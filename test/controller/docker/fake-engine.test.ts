/**
 * The in-memory engine (test/support/fake-engine.ts) gives Docker 20.10's answers to the engine
 * script (engine-script.ts), which docker-fake-engine.test.ts checks against the real engine, and
 * models what the recovery tests lean on: networks bound by id, and who can reach whom.
 */
import t from 'tap';
import { FakeEngine } from '../../support/fake-engine.js';
import { EXPECTED, runEngineScript, type ScriptEngine } from './engine-script.js';

const names = {
  network: 'cap-f-net',
  volume: 'cap-f-vol',
  autoVolume: 'cap-f-auto',
  container: 'cap-f',
  missing: 'cap-f-missing',
  image: 'capybara-sandbox:latest',
  missingImage: 'capybara-missing:latest',
  labels: { 'dev.capybara.test': 'fake' },
  subnetNetwork: 'cap-f-subnet-net',
  subnets: ['10.254.7.16/28', '10.254.7.32/28'] as const,
  second: 'cap-f-second',
};

t.test('the fake answers the engine script as Docker does', async (t) => {
  const fake = new FakeEngine([names.image]);
  const engine: ScriptEngine = Object.assign(fake, { pause: (name: string) => fake.pauseContainer(name), disconnect: (network: string, container: string) => fake.disconnectNetwork(network, container) });
  t.same(await runEngineScript(engine, names), EXPECTED);
  t.same([...fake.containers.keys(), ...fake.networkNames(), ...fake.volumes.keys()], [], 'nothing left');
});

t.test('the health probe reaches a running container on a shared network only', async (t) => {
  const fake = new FakeEngine(['img']);
  await fake.createNetwork({ Name: 'cap-n' });
  for (const name of ['cap-a', 'cap-b']) {
    await fake.createContainer(name, { Image: 'img', HostConfig: { NetworkMode: 'cap-n' } });
    await fake.startContainer(name);
  }
  await fake.createContainer('cap-c', { Image: 'img', HostConfig: { NetworkMode: 'none' } });
  await fake.startContainer('cap-c');
  const probe = async (from: string, to: string) => (await (await fake.startExec(from, { cmd: ['bash', '-c', `exec 3<>/dev/tcp/${to}/3128`], user: '1000:1000', onOutput: () => undefined })).finished);
  t.equal(await probe('cap-a', 'cap-b'), 0, 'same network');
  t.equal(await probe('cap-c', 'cap-b'), 137, 'no network in common');
  await fake.pauseContainer('cap-b');
  t.equal(await probe('cap-a', 'cap-b'), 137, 'a paused target does not answer');
  const output: string[] = [];
  fake.onExec = () => ({ exitCode: 3, stdout: 'out', stderr: 'err' });
  const run = await fake.startExec('cap-a', { cmd: ['true'], user: '0:0', onOutput: (s, c) => output.push(`${s}:${c.toString()}`) });
  t.equal(await run.finished, 3);
  t.same(output, ['stdout:out', 'stderr:err'], 'a replaced process model');
});
