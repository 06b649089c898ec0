# Required shape: a network create body must have a top-level "CheckDuplicate": true (without it
# Docker 20.10 makes a second network of an existing name; body-network.map refuses other values).
# The DEFINE group is a small JSON grammar (strings, objects, arrays, scalars) so that only
# members of the top-level object count: the same key nested in Labels or an unknown object does
# not. Anything the grammar cannot walk (or too deep to walk) fails closed.
(?(DEFINE)(?<s>"(?:[^"\\]++|\\.)*+")(?<v>\s*+(?:(?&s)|(?&o)|(?&a)|[-+.0-9a-zA-Z]++)\s*+)(?<o>\{\s*+(?:(?&s)\s*+:(?&v)(?:,\s*+(?&s)\s*+:(?&v))*+)?\})(?<a>\[\s*+(?:(?&v)(?:,(?&v))*+)?\]))^\s*+\{(?:\s*+(?&s)\s*+:(?&v),)*?\s*+"(?i:checkduplicate)"\s*+:\s*+true\b
