/** Which engine answers only a concurrent change explains (they end as `conflict`, never raw). */
import t from 'tap';
import { EngineStatusError } from '../../../controller/docker/engine-call.js';
import { asConflict, concurrentChange } from '../../../controller/sandbox/concurrent-change.js';
import { isSandboxError } from '../../../controller/spec/errors.js';

const docker = (status: number, message: string, byProxy = false): EngineStatusError =>
  new EngineStatusError(status >= 500 ? 'engine_error' : 'engine_refused', status, message, undefined, byProxy);

t.test('the answers of a concurrent change, and only those', async (t) => {
  const rows: Array<[EngineStatusError, boolean, string]> = [
    [docker(409, 'Conflict. The container name "/cap-x" is already in use'), true, 'a name in use'],
    [docker(404, 'No such container: cap-x'), true, 'removed meanwhile'],
    [docker(404, 'No such image: capybara-sandbox:latest'), false, 'a missing image is no race'],
    [docker(403, 'error while removing network: network cap-x-net id 1 has active endpoints'), true, 'a network still in use'],
    [docker(400, 'network cap-x-net is ambiguous (2 matches found based on name)'), true, 'two networks of one name'],
    [docker(500, 'Container e78d1d99 is marked for removal and cannot be connected or disconnected to the network'), true, 'a container another call is removing'],
    [docker(500, '(HTTP code 500) unexpected - Container 18a7ebdd is not running: Removal In Progress'), true, 'an exec into a container another call is removing'],
    [docker(500, 'driver failed programming external connectivity'), false, 'any other engine failure'],
    [docker(409, 'denied by the Docker socket proxy: route_not_allowed', true), false, 'the socket proxy\'s refusal is never a race'],
  ];
  for (const [err, expected, what] of rows) t.equal(concurrentChange(err), expected, what);
  t.ok(isSandboxError(asConflict(docker(500, 'Container x is marked for removal and cannot be connected or disconnected to the network'), 'cap-x', 'exec'), 'conflict'), 'as the call\'s result: conflict');
});
