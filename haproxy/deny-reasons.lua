-- The one catalog of the socket proxy's deny reasons: every code X-Socket-Proxy-Deny can carry
-- (as "<code>" or "<code>:<detail>", the detail naming the member, path, option or host), the
-- status it comes with, and what it means. haproxy.cfg and the Lua modules give the codes;
-- test/haproxy/deny-reasons.test.ts holds this catalog equal to what they give, both ways, and
-- to SECURITY.md's table of deny reasons. Codes are a contract the controller and operators
-- branch on: add codes, never rename one. Pure data.
return {
  -- Request shape (haproxy.cfg)
  { code = 'route_not_allowed', status = 403, what = 'A method, path or query the controller never sends' },
  { code = 'http_version', status = 403, what = 'Anything but HTTP/1.1 (HTTP/2 and HTTP/1.0 included)' },
  { code = 'api_version', status = 403, what = 'An API version prefix below 1.24 (those take a HostConfig at start)' },
  { code = 'api_version_cgroupns', status = 403, what = 'A container create below API 1.41, where Docker ignores CgroupnsMode' },
  { code = 'upgrade_not_allowed', status = 403, what = 'An Upgrade, or what HAProxy leaves of an h2c one, on any call but exec start' },
  { code = 'upgrade_not_tcp', status = 403, what = 'An exec start upgraded to anything but one "tcp"' },
  { code = 'transfer_encoding', status = 403, what = 'A chunked or otherwise encoded body' },
  { code = 'body_not_allowed', status = 403, what = 'A body on a call that takes none' },
  { code = 'body_required', status = 403, what = 'No body on a call that needs one' },
  { code = 'body_too_large', status = 403, what = 'A Content-Length over 32 KiB' },
  { code = 'body_incomplete', status = 403, what = 'A body not wholly buffered by the time it is checked' },
  { code = 'content_type', status = 403, what = 'A body type other than the call\'s (JSON; a tar for the archive)' },
  { code = 'network_name_not_allowed', status = 403, what = 'A network named in the path or body that is neither cap-... nor the shared one' },
  -- The body (json-strict.lua, body-check.lua, docker-schema.lua)
  { code = 'body_not_json', status = 403, what = 'Not one JSON value: trailing bytes, comments, NaN, leading zeros' },
  { code = 'body_not_object', status = 403, what = 'A JSON value that is not an object' },
  { code = 'body_not_ascii', status = 403, what = 'A byte above 0x7e or a \\u escape in a container, volume or network body' },
  { code = 'body_not_utf8', status = 403, what = 'Invalid UTF-8 or a lone surrogate in an exec command' },
  { code = 'control_byte', status = 403, what = 'A control byte in the body' },
  { code = 'key_not_ascii', status = 403, what = 'A key with a byte outside printable ASCII or a \\u escape (Go folds keys)' },
  { code = 'too_deep', status = 403, what = 'Nesting deeper than 10' },
  { code = 'too_broad', status = 403, what = 'More members or items than the place allows' },
  { code = 'too_long', status = 403, what = 'A key over 256 bytes' },
  { code = 'forbidden_key', status = 403, what = 'A member the schema of the call does not name' },
  { code = 'duplicate_key', status = 403, what = 'A member given twice (for a struct, in any letter case)' },
  { code = 'bad_value', status = 403, what = 'A value of the wrong type or outside the member\'s set' },
  { code = 'profile_missing', status = 403, what = 'A container create without a member of the hardening profile' },
  { code = 'cgroupns_private_required', status = 403, what = 'A container create without CgroupnsMode "private"' },
  { code = 'hostconfig_networkmode_required', status = 403, what = 'A container create without a HostConfig naming NetworkMode' },
  { code = 'network_mode_not_allowed', status = 403, what = 'A NetworkMode other than none, cap-... or the shared network' },
  { code = 'endpoint_not_allowed', status = 403, what = 'An endpoint other than the NetworkMode network, or with settings' },
  { code = 'anonymous_volume', status = 403, what = 'A volume mount without Source' },
  { code = 'nocopy_required', status = 403, what = 'A volume mount without VolumeOptions.NoCopy true' },
  { code = 'mount_target_not_allowed', status = 403, what = 'A mount target that is not a clean absolute path, or is /, /proc, /sys, /dev or below them' },
  { code = 'mount_nested', status = 403, what = 'A mount inside a volume\'s target' },
  { code = 'image_not_allowed', status = 403, what = 'An image not listed in SOCKET_PROXY_IMAGES, or a text dockerd could read as an image id' },
  { code = 'image_tag_required', status = 403, what = 'A pull of a bare name (every tag of it)' },
  { code = 'registry_not_allowed', status = 403, what = 'An image of a registry not listed in SOCKET_PROXY_REGISTRIES' },
  { code = 'limit_above_ceiling', status = 403, what = 'A limit above its SOCKET_PROXY_MAX_* ceiling' },
  { code = 'network_name_required', status = 403, what = 'A network create without Name' },
  { code = 'check_duplicate_required', status = 403, what = 'A network create without CheckDuplicate true' },
  { code = 'network_option_required', status = 403, what = 'A network create without an option its kind needs (enable_icc, Internal, inhibit_ipv4)' },
  { code = 'network_option_not_allowed', status = 403, what = 'A network create with an option its kind must not have' },
  { code = 'subnet_not_internal', status = 403, what = 'A chosen subnet on the shared network' },
  { code = 'connect_shape', status = 403, what = 'A network connect other than a cap- container with one private address' },
  { code = 'volume_name_required', status = 403, what = 'A volume create without a cap- Name' },
  { code = 'archive_not_allowed', status = 403, what = 'An archive other than the controller\'s workspace-owner archive' },
  { code = 'body_check_failed', status = 403, what = 'The body check itself failed (an error, its time or its memory ran out)' },
  -- Images and network ids (image-ref.lua, network-proof.lua)
  { code = 'image_check_failed', status = 403, what = 'The image check itself failed' },
  { code = 'network_not_allowed', status = 403, what = 'A network id that names a network other than cap-... or the shared one' },
  { code = 'network_not_found', status = 404, what = 'A network id that names no network (as dockerd answers)' },
  { code = 'network_proof_failed', status = 403, what = 'dockerd could not be asked what a network id names' },
  -- Slots (haproxy.cfg)
  { code = 'too_many_long_calls', status = 429, what = 'Every slot of the kind (wait, removal, stream) is taken; retry later' },
}
