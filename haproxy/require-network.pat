# Required shape: a network create body must have a top-level Name, a plain name (haproxy.cfg then
# admits only "cap-..." and the deployment's shared network).
# The DEFINE group is a small JSON grammar (strings, objects, arrays, scalars) so that only
# members of the top-level object count: the same key nested in Labels or an unknown object does
# not. Anything the grammar cannot walk (or too deep to walk) fails closed.
(?(DEFINE)(?<s>"(?:[^"\\]++|\\.)*+")(?<v>\s*+(?:(?&s)|(?&o)|(?&a)|[-+.0-9a-zA-Z]++)\s*+)(?<o>\{\s*+(?:(?&s)\s*+:(?&v)(?:,\s*+(?&s)\s*+:(?&v))*+)?\})(?<a>\[\s*+(?:(?&v)(?:,(?&v))*+)?\]))^\s*+\{(?:\s*+(?&s)\s*+:(?&v),)*?\s*+"(?i:name)"\s*+:\s*+"[a-zA-Z0-9][a-zA-Z0-9_.-]*+"
