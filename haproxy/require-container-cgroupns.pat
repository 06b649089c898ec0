# Required shape: a container create body must have a top-level HostConfig object that itself sets
# "CgroupnsMode": "private" (cgroup v1 engines otherwise give the container the host's cgroup
# namespace; body-deny.map refuses every other value wherever the key appears).
# The DEFINE group is a small JSON grammar (strings, objects, arrays, scalars) so that only
# members of the top-level object (and of its HostConfig) count: the same key nested in Labels or
# an unknown object does not. Anything the grammar cannot walk (or too deep to walk) fails closed.
(?(DEFINE)(?<s>"(?:[^"\\]++|\\.)*+")(?<v>\s*+(?:(?&s)|(?&o)|(?&a)|[-+.0-9a-zA-Z]++)\s*+)(?<o>\{\s*+(?:(?&s)\s*+:(?&v)(?:,\s*+(?&s)\s*+:(?&v))*+)?\})(?<a>\[\s*+(?:(?&v)(?:,(?&v))*+)?\]))^\s*+\{(?:\s*+(?&s)\s*+:(?&v),)*?\s*+"(?i:hostconfig)"\s*+:\s*+\{(?:\s*+(?&s)\s*+:(?&v),)*?\s*+"(?i:cgroupnsmode)"\s*+:\s*+"private"
