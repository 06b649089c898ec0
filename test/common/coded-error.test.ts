/**
 * Errors are told apart by brand, not by `instanceof`: a host application that loads two copies
 * of this package (two versions in node_modules) has two of every class, and an error of one
 * copy is no instance of the other's. A second copy is a second module instance here (the same
 * file under another URL).
 */
import t from 'tap';
import { CodedError, isCodedError } from '../../common/index.js';
import { EngineStatusError, isEngineStatusError } from '../../controller/docker/engine-call.js';
import { isSandboxError, SandboxError } from '../../controller/spec/errors.js';
import { DialError, isDialError } from '../../proxy/upstream/dial.js';

type ErrorsModule = typeof import('../../controller/spec/errors.js');
type CodedModule = typeof import('../../common/coded-error.js');

t.test('an error of another copy of the package is recognised by its brand, with its code', async (t) => {
  const other = (await import(`../../common/coded-error.js?copy=${Date.now()}`)) as CodedModule;
  const err = new other.CodedError('x_code', 'from the other copy');
  t.notOk(err instanceof CodedError, 'instanceof fails across copies');
  t.ok(isCodedError(err, 'CodedError'), 'the brand holds');
  const errors = (await import(`../../controller/spec/errors.js?copy=${Date.now()}`)) as ErrorsModule;
  const sandboxError = new errors.SandboxError('not_found', 'gone');
  t.notOk(sandboxError instanceof SandboxError);
  t.ok(isSandboxError(sandboxError), 'isSandboxError holds across copies');
  t.ok(isSandboxError(sandboxError, 'not_found'));
  t.notOk(isSandboxError(sandboxError, 'conflict'), 'and still reads the code');
});

t.test('a subclass carries the names of the classes it extends, and nothing else passes', async (t) => {
  const status = new EngineStatusError('engine_refused', 403, 'refused', undefined, true);
  t.ok(isEngineStatusError(status));
  t.ok(isSandboxError(status, 'engine_refused'), 'an EngineStatusError is a SandboxError');
  t.ok(isCodedError(status, 'CodedError'));
  t.notOk(isEngineStatusError(new SandboxError('engine_refused', 'x')), 'a SandboxError is no EngineStatusError');
  t.ok(isDialError(new DialError('no', ['1.2.3.4:443'])));
  t.notOk(isDialError(new SandboxError('conflict', 'x')));
  const lookalike = Object.assign(new Error('x'), { code: 'not_found', name: 'SandboxError' });
  t.notOk(isSandboxError(lookalike), 'a plain error with the same name and code is not one');
  for (const value of [undefined, null, 'SandboxError', 42, {}]) t.notOk(isCodedError(value, 'CodedError'), String(value));
});
