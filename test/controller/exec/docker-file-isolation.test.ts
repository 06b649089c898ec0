/**
 * The file scripts (readFile, writeFile, stat) run as the sandbox user, as commands do, so a
 * process left by an earlier command can race their path: it swaps a link between a plain file
 * and a /proc entry of another command (its stdout pipe, its environment). A command is in a
 * Landlock domain of its own and the kernel refuses it those entries of a process outside it; a
 * file script in no domain opened them for it (review finding): a writeFile wrote into another
 * command's output, a readFile returned another command's environment. Real engine, real proxy.
 */
import t from 'tap';
import { sandboxTestEnv, SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { fileNeeds } from '../../support/needs.js';

await fileNeeds(t, 'engine');

/** A leftover that swaps `/workspace/<name>` between a link to a plain file and one to `target`. */
const flipper = (name: string, target: string) => `echo plain > /workspace/real-${name}
setsid python3 -c '
import os
os.chdir("/workspace")
while True:
    try:
        os.symlink("real-${name}", ".${name}1"); os.rename(".${name}1", "${name}")
        os.symlink("${target}", ".${name}2"); os.rename(".${name}2", "${name}")
    except FileExistsError:
        pass
' >/dev/null 2>&1 < /dev/null &`;

const TRIES = 40;

t.test('a file script never opens what the sandbox user\'s commands are refused: another command\'s output or environment', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { provider, env } = s;
  const h = await provider.create({ id: `${env.runId}-files`, image: SANDBOX_IMAGE, limits: { egress: 'none', cpu: 1 } });
  t.teardown(() => provider.destroy(h));
  const victim = provider.exec(h, 'echo victim-start; sleep 20; echo victim-end', { tag: 'victim', env: { VICTIM_TOKEN: 'tok-9f3c1e' } });
  let pid = '';
  for (let i = 0; i < 50 && pid === ''; i++) {
    pid = (await provider.exec(h, 'pgrep -u sandbox -x sleep | head -1')).stdout.trim();
    if (pid === '') await new Promise((r) => setTimeout(r, 100));
  }
  t.match(pid, /^\d+$/, 'the victim runs');
  const direct = await provider.exec(h, `echo from-a-command > /proc/${pid}/fd/1; tr '\\0' '\\n' < /proc/${pid}/environ`);
  t.match(direct.stderr, /Permission denied/, 'a command itself may not open them');

  await provider.exec(h, `${flipper('w', `/proc/${pid}/fd/1`)}\n${flipper('r', `/proc/${pid}/environ`)}`, { tag: 'flipper' });
  const read: string[] = [];
  for (let i = 0; i < TRIES; i++) {
    await provider.writeFile(h, '/workspace/w', `INJECTED-${i}\n`).catch(() => undefined);
    read.push(await provider.readFile(h, '/workspace/r').then((b) => Buffer.from(b).toString('latin1'), () => ''));
  }
  await provider.killTagged(h, ['flipper']);
  t.ok(read.some((r) => r === 'plain\n'), 'the race ran: some reads found the plain file');
  t.notOk(read.some((r) => r.includes('tok-9f3c1e')), 'no readFile returned the other command\'s environment');
  const result = await victim;
  t.same([result.exitCode, result.stdout], [0, 'victim-start\nvictim-end\n'], 'no writeFile wrote into the other command\'s output');
});
