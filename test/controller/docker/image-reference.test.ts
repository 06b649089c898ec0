import t from 'tap';
import { pullReference } from '../../../controller/docker/image-reference.js';

t.test('a pull names a tag or a digest, never a bare name (every tag of it)', async (t) => {
  const rows: Array<[string, string]> = [
    ['capybara-sandbox', 'capybara-sandbox:latest'],
    ['capybara-sandbox:latest', 'capybara-sandbox:latest'],
    ['team/img:1', 'team/img:1'],
    ['registry.example.com:5000/team/img', 'registry.example.com:5000/team/img:latest'],
    ['registry.example.com:5000/team/img:2', 'registry.example.com:5000/team/img:2'],
    [`img@sha256:${'a'.repeat(64)}`, `img@sha256:${'a'.repeat(64)}`],
  ];
  for (const [image, sent] of rows) t.equal(pullReference(image), sent, image);
});
