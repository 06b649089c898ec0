-- What each Docker call the socket proxy forwards may carry in its body: an exact schema per call,
-- derived from the bodies controller/ builds (container-spec.ts, network-spec.ts, volume-spec.ts,
-- engine-exec.ts, engine.ts). A member not named here is refused; so is a value of another type
-- or outside its set, and a missing required member. test/haproxy/schema-sync.test.ts keeps this
-- file and the controller equal: every body the controller builds passes, and every member named
-- here is one the controller sends, or is in that test's short list of extras (with the case of
-- the public corpus that needs it).
--
-- Kinds (checked by body-check.lua):
--   struct{ fields = { { 'Key', spec, required = 'reason' }, ... }, prefix = 'X.', rules = {...} }
--     Go struct: keys match exactly (Go folds case, so a second spelling is a duplicate); a key
--     not listed is forbidden_key. `rules` see the struct's values and may refuse.
--   map{ key = test, keys = { allowed = true }, value = spec, max = n, label = 'X' }
--     Go map: keys are data, matched exactly; `keys` (when given) is the only keys allowed.
--   list{ item = spec, min = n, max = n, label = 'X' }
--   str(test) / one_of{ ... } / int(min, max, ceiling) / bool(only) / text()
--     `test` is a Lua pattern or a function(value, settings) -> boolean[, reason]: a reason given
--     with false is the refusal. text() is any UTF-8 (exec commands); every other string must pass
--     its test, which never admits a control byte. `ceiling` names the setting (proxy-settings.lua)
--     an integer may not exceed: above it the refusal is limit_above_ceiling:<Key>.
-- `bad = 'reason'` on a spec replaces the generic bad_value:<Key> for that value.

local image_ref = require('image-ref')

local S = { routes = {} }

local function struct(fields, opts)
  opts = opts or {}
  return { kind = 'struct', fields = fields, prefix = opts.prefix or '', rules = opts.rules or {} }
end
local function map(opts) opts.kind = 'map'; return opts end
local function list(item, min, max) return { kind = 'list', item = item, min = min or 0, max = max } end
local function str(test, bad) return { kind = 'string', test = test, bad = bad } end
local function one_of(values, bad)
  local set = {}
  for _, v in ipairs(values) do set[v] = true end
  return { kind = 'string', test = function(v) return set[v] == true end, bad = bad, values = values }
end
local function int(min, max, ceiling) return { kind = 'int', min = min, max = max, ceiling = ceiling } end
local function bool(only, bad) return { kind = 'bool', only = only, bad = bad } end
local function text() return { kind = 'text' } end

-- Plain values ------------------------------------------------------------------------------
local PRINTABLE = '^[ -~]*$'
local NON_EMPTY_PRINTABLE = '^[ -~]+$'
-- An image a container may run: listed, or from a listed registry (image-ref.lua).
local function image(v, settings)
  local reason = image_ref.judge(v, settings)
  return reason == nil, reason
end
-- A name Docker can never read as an ID or a path: "cap-" then a plain name.
local function cap_name(v)
  return v:find('^cap%-[A-Za-z0-9][A-Za-z0-9_.%-]*$') ~= nil
end
-- Absolute container paths: no "..", no separators Docker reads inside mount specs (":", ",").
local function abs_path(v)
  return #v <= 4096 and v:find('^/[A-Za-z0-9_.%-/]*$') ~= nil and not v:find('%.%.')
end

-- Where a volume or tmpfs may be mounted. dockerd acts on a mount target: it copies the image's
-- content there into an empty volume (following symlinks a container planted in it: NoCopy,
-- below, turns that off), and a mount on /proc, /sys or /dev replaces what the kernel and the
-- runtime put there (masked paths among them). So a target is a normalised absolute path (no
-- "//", "/./", "..", trailing "/"), never "/" and never /proc, /sys, /dev or below them.
S.MOUNT_TARGET_DENIED = { '/proc', '/sys', '/dev' }
-- Where the controller mounts volumes (controller/docker/container-spec.ts): the workspace, the
-- skills (read-only, and writable for root under its 0700 tmpfs), an egress proxy's registrations.
-- Of a container with more than one volume, every volume is at one of these (HOST_CONFIG's rules).
S.VOLUME_TARGETS = {
  ['/workspace'] = true,
  ['/skills'] = true,
  ['/opt/capybara/skills'] = true,
  ['/var/lib/capybara-egress/tenants'] = true,
}
-- Where the images' own symlinks to directories lead, and the symlinks themselves (Debian's merged
-- /usr: /bin, /sbin, /lib* -> usr/...; /var/run -> /run, /var/lock -> /run/lock; openssl's
-- /usr/lib/ssl/certs and private -> /etc/ssl/...; /var/spool/mail -> /var/mail: every symlink to a
-- directory in the project's images, `find / -xdev -type l`): a path through one of these
-- reaches a volume at or below its target whatever the text says. runc makes every mount point by
-- path (os.MkdirAll, or an O_CREAT open for a file, on a path resolved first: CVE-2024-45310 in the
-- runc 1.1.5 here), so a tmpfs at /var/run/a/b with a volume at /run is made inside the volume,
-- where a container sharing it swaps a directory for a symlink meanwhile, and the mount point is
-- created on the host (a review won that within 23 starts). A volume at or below one of these is
-- therefore a container's only mount point besides runc's own under /proc, /sys, /dev and /etc:
-- no tmpfs, and no Init (runc binds docker-init at /sbin/docker-init).
S.IMAGE_SYMLINKED = {
  '/usr', '/run', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32', '/var/run', '/var/lock',
  '/etc/ssl', '/var/mail', '/var/spool/mail',
}
local function image_symlinked(target)
  for _, p in ipairs(S.IMAGE_SYMLINKED) do
    if target == p or target:sub(1, #p + 1) == p .. '/' then return true end
  end
  return false
end
local function mount_target(v)
  local ok = #v <= 4096 and v:find('^/[A-Za-z0-9_.%-/]*$') ~= nil and v ~= '/' and not v:find('/$')
  if ok then
    for segment in (v:sub(2) .. '/'):gmatch('([^/]*)/') do
      if segment == '' or segment == '.' or segment == '..' then ok = false end
    end
    for _, denied in ipairs(S.MOUNT_TARGET_DENIED) do
      if v == denied or v:sub(1, #denied + 1) == denied .. '/' then ok = false end
    end
  end
  if ok then return true end
  return false, 'mount_target_not_allowed:' .. v:sub(1, 64):gsub('[^A-Za-z0-9_./%-]', '?')
end
-- A working directory: a clean absolute path outside /proc, /sys and /dev (a directory there, such
-- as /proc/self/fd/N, is a descriptor runc may still hold: CVE-2024-21626). Clean as dockerd
-- stores it (filepath.Clean): no "//", "/./" or trailing "/", so that "//proc/self/fd/7" cannot
-- pass as a path outside /proc and reach runc as /proc/self/fd/7.
local function working_dir(v)
  if not abs_path(v) then return false end
  if v ~= '/' then
    for segment in (v:sub(2) .. '/'):gmatch('([^/]*)/') do
      if segment == '' or segment == '.' then return false end
    end
  end
  for _, denied in ipairs(S.MOUNT_TARGET_DENIED) do
    if v == denied or v:sub(1, #denied + 1) == denied .. '/' then return false end
  end
  return true
end
-- "uid", "uid:gid" or a user name: what `User` means to Docker, nothing else.
local function user(v)
  return v:find('^[A-Za-z0-9_.%-]+$') ~= nil or v:find('^[A-Za-z0-9_.%-]+:[A-Za-z0-9_.%-]+$') ~= nil
end
-- A network a network create may name: "cap-..." or exactly the deployment's shared network
-- (never a bare "cap" prefix: that would admit the operator's own networks, such as a compose
-- project's capybara-sandbox_default).
local function network_name(v, settings)
  return cap_name(v) or v == settings.shared_network
end
-- A network a container or an endpoint may join: such a name, or a full network id. An id can
-- address any network on the host, so it is only recorded here (settings.network_ids), and
-- socket-proxy.lua asks dockerd what it names before the request goes on (network-proof.lua).
local function network_ref(v, settings)
  if #v == 64 and v:find('^[0-9a-f]+$') then
    settings.network_ids[#settings.network_ids + 1] = v
    return true
  end
  return network_name(v, settings)
end

-- IPv4 in dotted decimal, exactly as Go's parser takes it (no leading zeros), as a number.
local function ipv4(v)
  local a, b, c, d = v:match('^(%d+)%.(%d+)%.(%d+)%.(%d+)$')
  if a == nil then return nil end
  local n = 0
  for _, o in ipairs({ a, b, c, d }) do
    if #o > 3 or (#o > 1 and o:sub(1, 1) == '0') or tonumber(o) > 255 then return nil end
    n = n * 256 + tonumber(o)
  end
  return n
end
-- A canonical CIDR block: base and prefix length, no host bits set.
local function cidr(v)
  local addr, len = v:match('^([%d.]+)/(%d%d?)$')
  local base = addr and ipv4(addr)
  local prefix = tonumber(len)
  if base == nil or prefix > 32 or (len:sub(1, 1) == '0' and #len > 1) then return nil end
  if base % (1 << (32 - prefix)) ~= 0 then return nil end
  return base, prefix
end
local function inside(base, prefix, outer_base, outer_prefix)
  return prefix >= outer_prefix and base >> (32 - outer_prefix) == outer_base >> (32 - outer_prefix)
end
-- RFC 1918 only: a sandbox subnet must never shadow a public address or the link-local metadata
-- range for whatever joins it.
S.PRIVATE_RANGES = { { 0x0a000000, 8 }, { 0xac100000, 12 }, { 0xc0a80000, 16 } }
local function private(base, prefix)
  for _, r in ipairs(S.PRIVATE_RANGES) do
    if inside(base, prefix, r[1], r[2]) then return true end
  end
  return false
end
-- A sandbox network's subnet: private, a /24 to a /29 (room for a sandbox, its gateway and its
-- egress proxy; never a block that swallows a whole private range).
S.SUBNET_PREFIX_MIN = 24
S.SUBNET_PREFIX_MAX = 29
local function sandbox_subnet(v)
  local base, prefix = cidr(v)
  return base ~= nil and prefix >= S.SUBNET_PREFIX_MIN and prefix <= S.SUBNET_PREFIX_MAX and private(base, prefix)
end
local function private_ipv4(v)
  local n = ipv4(v)
  return n ~= nil and private(n, 32)
end

-- No new privileges, spelled as Docker documents it (the only security option allowed: seccomp,
-- AppArmor and SELinux labels stay the engine's defaults).
local NO_NEW_PRIVILEGES = { 'no-new-privileges', 'no-new-privileges:true', 'no-new-privileges=true' }

-- tmpfs options as mount(8) reads them: only these, and nosuid plus nodev always (a setuid file
-- or a device node on a tmpfs would otherwise work). A later option wins in mount(8), which is why
-- "suid" or "dev" are not in the list at all.
local TMPFS_OPTIONS = { rw = true, ro = true, exec = true, noexec = true, nosuid = true, nodev = true }
local SIZE_UNIT = { [''] = 1, k = 1024, m = 1024 * 1024, g = 1024 * 1024 * 1024 }
-- A tmpfs size (`count` of `unit`) within the ceiling: half the memory ceiling, as the controller
-- sizes /tmp. 0 is no limit at all to the kernel. The count is compared with the ceiling in units,
-- never multiplied: the kernel shifts it by the unit modulo 2^64 (memparse), and Lua's integers
-- wrap the same way, so 17179869185g would read as 1 GiB to both and a count with a leading zero
-- as two different sizes (below).
local function tmpfs_size_ok(count, unit, settings)
  return count >= 1 and count <= settings.max_tmpfs_bytes // SIZE_UNIT[unit]
end
local function tmpfs_options(v, settings)
  if #v > 256 then return false end
  local seen = {}
  for token in (v .. ','):gmatch('([^,]*),') do
    local digits, unit = token:match('^size=(%d+)([kmg]?)$')
    if TMPFS_OPTIONS[token] then
      seen[token] = true
    elseif digits ~= nil and #token <= 24 then
      -- Plain decimal only: the kernel reads the count as strtoull with base 0, so a leading zero
      -- makes it octal (size=005654066747146247g: 7 GiB read in decimal, 6.9 EiB to the kernel).
      if #digits > 1 and digits:sub(1, 1) == '0' then return false end
      if not tmpfs_size_ok(tonumber(digits), unit, settings) then return false, 'limit_above_ceiling:Tmpfs' end
    elseif not token:find('^mode=[0-7][0-7][0-7][0-7]?$') then
      return false
    end
  end
  return seen.nosuid == true and seen.nodev == true
end

-- Log caps: json-file and local keep logs on the engine host, and only with a size cap are they
-- bounded (a sandbox floods its egress proxy's log at about 3 GB an hour otherwise).
S.LOG_MAX_BYTES = 100 * 1024 * 1024
S.LOG_MAX_FILES = 5
local UNIT = { [''] = 1, k = 1024, m = 1024 * 1024, g = 1024 * 1024 * 1024 }
local function log_max_size(v)
  local digits, unit = v:match('^([1-9]%d?%d?%d?%d?%d?%d?%d?%d?)([kmg]?)$')
  return digits ~= nil and tonumber(digits) * UNIT[unit] <= S.LOG_MAX_BYTES
end
-- A count of log files: 1 to LOG_MAX_FILES, in plain decimal (what dockerd's strconv.Atoi reads).
local function log_max_file(v)
  return v:find('^[1-9]%d?%d?$') ~= nil and tonumber(v) <= S.LOG_MAX_FILES
end

-- Labels: plain data to Docker, refused only where they could not be read back as sent.
local LABELS = map{ key = function(k) return #k > 0 and k:find(PRINTABLE) ~= nil end, value = str(PRINTABLE), max = 256 }

-- Container create ----------------------------------------------------------------------------
local ENDPOINT_SETTINGS = struct({})

local MOUNT = struct({
  { 'Type', one_of({ 'volume', 'tmpfs' }), required = 'bad_value:Mounts.Type' },
  -- A named cap- volume: never a host path, another container's volume or an anonymous volume.
  { 'Source', str(cap_name) },
  { 'Target', str(mount_target), required = 'bad_value:Mounts.Target' },
  { 'ReadOnly', bool() },
  -- NoCopy, always: without it dockerd copies the image's content at the target into an empty
  -- volume, following any symlink a container that shares the volume planted meanwhile, as root,
  -- into the host (SECURITY.md, section 2). No Labels or DriverConfig (a driver's own options).
  { 'VolumeOptions', struct({ { 'NoCopy', bool(true, 'nocopy_required'), required = 'nocopy_required' } }, { prefix = 'Mounts.VolumeOptions.' }) },
  -- Mode is the tmpfs root's permission bits (Docker mounts tmpfs nosuid,nodev,noexec by itself).
  { 'TmpfsOptions', struct({ { 'SizeBytes', int(0, nil, 'max_tmpfs_bytes') }, { 'Mode', int(0, 4095) } }, { prefix = 'Mounts.TmpfsOptions.' }) },
}, {
  prefix = 'Mounts.',
  rules = {
    function(m)
      -- Without a Source Docker makes an anonymous volume with a random name that no cap- rule
      -- can address or clean up.
      if m.Type == 'volume' and m.Source == nil then return 'anonymous_volume:Mounts' end
      if m.Type == 'volume' and m.VolumeOptions == nil then return 'nocopy_required' end
      if m.Type == 'volume' and m.TmpfsOptions ~= nil then return 'bad_value:Mounts.TmpfsOptions' end
      if m.Type == 'tmpfs' and m.Source ~= nil then return 'bad_value:Mounts.Source' end
      if m.Type == 'tmpfs' and m.VolumeOptions ~= nil then return 'bad_value:Mounts.VolumeOptions' end
    end,
  },
})

local LOG_CONFIG = struct({
  { 'Type', one_of({ 'json-file', 'local' }), required = 'bad_value:LogConfig.Type' },
  { 'Config', map{
    keys = { ['max-size'] = true, ['max-file'] = true },
    value = str('.*'),
    values = { ['max-size'] = str(log_max_size), ['max-file'] = str(log_max_file) },
    label = 'LogConfig.Config',
  } },
}, {
  prefix = 'LogConfig.',
  rules = {
    function(l)
      if l.Config == nil or l.Config['max-size'] == nil then return 'profile_missing:LogConfig.max-size' end
    end,
  },
})

local HOST_CONFIG = struct({
  -- Only "none", "cap-..." or the shared network: never host, bridge, default or container:<id>.
  { 'NetworkMode', str(function(v, s) return v == 'none' or network_ref(v, s) end, 'network_mode_not_allowed'),
    required = 'hostconfig_networkmode_required' },
  -- The name server of an allowlist sandbox: its egress proxy's fixed address (transparent mode).
  -- Docker's embedded DNS forwards to it from the container's own network namespace. Exactly one
  -- private IPv4 address: never a loopback one (the embedded DNS can dial a loopback server from
  -- the host's namespace, the host's own resolver), a link-local, public or IPv6 one, a name; no
  -- DnsOptions, DnsSearch or ExtraHosts (not listed), so nothing else changes how it resolves.
  { 'Dns', list(str(private_ipv4), 1, 1) },
  -- The hardening profile: every container the proxy lets through is confined like a sandbox.
  -- Root in the container holds no capability (no raw sockets, mknod, setuid, mounts).
  { 'CapDrop', list(one_of({ 'ALL' }), 1, 1), required = 'profile_missing:CapDrop' },
  { 'SecurityOpt', list(one_of(NO_NEW_PRIVILEGES), 1, 1), required = 'profile_missing:SecurityOpt' },
  { 'ReadonlyRootfs', bool(true), required = 'profile_missing:ReadonlyRootfs' },
  -- Zero or less is "unlimited" to Docker; above the ceilings (the controller's own maxLimits)
  -- a value is as good as unlimited on any host (a PidsLimit past pid_max, 2^63 bytes).
  { 'PidsLimit', int(1, nil, 'max_pids'), required = 'profile_missing:PidsLimit' },
  { 'Memory', int(1, nil, 'max_memory_bytes'), required = 'profile_missing:Memory' },
  -- Equal to Memory when given: no swap beyond the memory cap (-1 would be unlimited swap).
  { 'MemorySwap', int(1) },
  -- On cgroup v1 Docker 20.10 otherwise gives a container the host's cgroup namespace.
  { 'CgroupnsMode', one_of({ 'private' }), required = 'cgroupns_private_required' },
  -- "private" when given; absent is the engine's default, a namespace of the container's own.
  { 'IpcMode', one_of({ 'private' }) },
  { 'NanoCpus', int(1, nil, 'max_nano_cpus') },
  { 'Init', bool() },
  -- "on-failure" brings back an egress proxy whose process died (the OOM killer); never "always" or
  -- "unless-stopped", which would also restart what an operator or the controller stopped.
  { 'RestartPolicy', struct({
    { 'Name', one_of({ 'no', 'on-failure' }) },
    -- What an inspect gives back, copied by the controller's rebuild of a container.
    { 'MaximumRetryCount', int(0, 0) },
  }, { prefix = 'RestartPolicy.' }) },
  { 'Tmpfs', map{ key = mount_target, value = str(tmpfs_options), max = 8, label = 'Tmpfs' } },
  { 'Mounts', list(MOUNT, 0, 16) },
  { 'Runtime', one_of({ 'runc', 'runsc' }) },
  { 'Privileged', bool(false) },
  -- A higher score only makes the container the OOM killer's first choice.
  { 'OomScoreAdj', int(0, 1000) },
  -- One kernel setting with one value: IPv4 forwarding off in the container's own network
  -- namespace (an egress proxy joins its sandbox's network and the shared one, and must never
  -- route between them). Every other sysctl is refused: net.ipv6.conf.*.disable_ipv6=0 would
  -- bring IPv6 back, others change how the network behaves.
  { 'Sysctls', map{ keys = { ['net.ipv4.ip_forward'] = true }, value = one_of({ '0' }), max = 1, label = 'Sysctls' } },
  { 'LogConfig', LOG_CONFIG },
}, {
  rules = {
    function(h)
      if h.MemorySwap ~= nil and h.MemorySwap ~= h.Memory then return 'bad_value:MemorySwap' end
    end,
    -- Nothing mounted inside a volume. A volume's content is the caller's (another container that
    -- shares it can put a symlink anywhere in it), and a mount inside it is made by following its
    -- path: runc mounts a tmpfs or volume onto wherever that symlink points (/proc/sys, /dev), and
    -- dockerd, for an archive call, bind-mounts the container's volumes on the host itself, along
    -- the same path. A volume inside a tmpfs is fine: a tmpfs is new and empty at every start.
    function(h)
      local volumes = {}
      for _, m in ipairs(h.Mounts or {}) do
        if m.Type == 'volume' then volumes[#volumes + 1] = m.Target end
      end
      if #volumes == 0 then return nil end
      local targets = {}
      for _, m in ipairs(h.Mounts or {}) do targets[#targets + 1] = m.Target end
      for target in pairs(h.Tmpfs or {}) do targets[#targets + 1] = target end
      table.sort(targets)
      for _, target in ipairs(targets) do
        for _, volume in ipairs(volumes) do
          if target:sub(1, #volume + 1) == volume .. '/' then return 'mount_nested:' .. target:sub(1, 64) end
        end
      end
      -- Nor anything at a volume's own target: dockerd 20.10 checks a Tmpfs key against Binds
      -- only, and runc mounts the tmpfs over the volume, which inspect's Mounts still lists (so
      -- the archive proof would judge a mount point that is not where the archive lands).
      for i = 2, #targets do
        if targets[i] == targets[i - 1] then
          for _, volume in ipairs(volumes) do
            if targets[i] == volume then return 'mount_nested:' .. targets[i]:sub(1, 64) end
          end
        end
      end
    end,
    -- A volume where the images' own symlinks lead is the only mount runc makes by path (above,
    -- S.IMAGE_SYMLINKED).
    function(h)
      local others = h.Init == true or next(h.Tmpfs or {}) ~= nil
      for _, m in ipairs(h.Mounts or {}) do
        if m.Type == 'tmpfs' then others = true end
      end
      if not others then return nil end
      for _, m in ipairs(h.Mounts or {}) do
        if m.Type == 'volume' and image_symlinked(m.Target) then return 'mount_target_not_allowed:' .. m.Target:sub(1, 64) end
      end
    end,
    -- The text of a path is not where it leads: the image's own symlinks (/var/run -> /run,
    -- /lib -> usr/lib in every Debian image) can put one volume's target inside another's content
    -- whatever the two strings say, and for an archive call dockerd bind-mounts the volumes on the
    -- host one after the other, resolving each target through those mounted before it; a
    -- container sharing the outer volume swaps a directory for a symlink meanwhile, and the inner
    -- volume is mounted over a host directory of its choosing. So a container with more than one
    -- volume has its volumes only where the controller puts them (S.VOLUME_TARGETS: no image
    -- symlink among them leads into another), and no volume is ever at /etc, where dockerd mounts
    -- its own hosts, hostname and resolv.conf files the same way.
    function(h)
      local volumes = {}
      for _, m in ipairs(h.Mounts or {}) do
        if m.Type == 'volume' then
          if m.Target == '/etc' then return 'mount_target_not_allowed:/etc' end
          volumes[#volumes + 1] = m.Target
        end
      end
      if #volumes < 2 then return nil end
      for _, target in ipairs(volumes) do
        if not S.VOLUME_TARGETS[target] then return 'mount_target_not_allowed:' .. target:sub(1, 64) end
      end
    end,
  },
})

S.routes.container_create = struct({
  { 'Image', str(image), required = 'image_not_allowed' },
  { 'User', str(user) },
  { 'Entrypoint', list(str(PRINTABLE), 0, 64) },
  { 'Cmd', list(str(PRINTABLE), 0, 1024) },
  { 'WorkingDir', str(working_dir) },
  { 'Env', list(str(NON_EMPTY_PRINTABLE), 0, 1024) },
  { 'Labels', LABELS },
  -- Only the image's health check turned off ({"Test":["NONE"]}): the controller checks its egress
  -- proxies itself, and the egress image's check starts a node process every 10 s, per sandbox.
  -- Never a check of the caller's: a command dockerd runs in the container, as its root.
  { 'Healthcheck', struct({
    { 'Test', list(one_of({ 'NONE' }), 1, 1), required = 'bad_value:Healthcheck.Test' },
  }, { prefix = 'Healthcheck.' }) },
  -- Required: without it Docker reads host fields (Privileged, Binds, ...) from the top level.
  { 'HostConfig', HOST_CONFIG, required = 'hostconfig_networkmode_required' },
  { 'NetworkingConfig', struct({
    -- One endpoint (API 1.41 takes one per create), on the network NetworkMode names, with no
    -- settings: no chosen address, MAC, alias, driver option or NetworkID (which would override
    -- the key and join another network).
    { 'EndpointsConfig', map{ key = network_ref, value = ENDPOINT_SETTINGS, max = 1,
      label = 'EndpointsConfig', bad_key = 'endpoint_not_allowed' } },
  }, { prefix = 'NetworkingConfig.' }) },
}, {
  rules = {
    -- S.IMAGE_SYMLINKED names the symlinks of the images the operator listed by name (the project's
    -- own; a listed image must have no others). An image that is merely from a listed registry
    -- (anyone's who can push there) can have any, and runc makes every mount point by path
    -- (CVE-2024-45310) through them and through a volume's content, which a container sharing the
    -- volume swaps meanwhile: `/opt -> /workspace/o` put a tmpfs at /opt/p/q inside the workspace
    -- volume and runc created a directory in a root-only host directory within 10 starts;
    -- `/workspace -> /etc` put the volume alone over /etc, where runc makes dockerd's resolv.conf,
    -- and it created that file on the host within 6 (a review, through the proxy). So only a
    -- container of an image listed by name has a volume.
    -- And the image's own VOLUME lines are mounts too, which dockerd makes whatever the request
    -- says and runc makes by path after the request's volumes: such a container's image is asked
    -- for first (image-proof.lua), and passes only declaring none.
    function(c, s)
      for _, m in ipairs(c.HostConfig.Mounts or {}) do
        if m.Type == 'volume' then
          if not s.images[c.Image] then return 'mount_image_not_listed:' .. m.Target:sub(1, 64) end
          s.image_to_prove = c.Image
          return nil
        end
      end
    end,
    function(c)
      local endpoints = c.NetworkingConfig and c.NetworkingConfig.EndpointsConfig
      if endpoints == nil then return nil end
      for name in pairs(endpoints) do
        if name ~= c.HostConfig.NetworkMode then return 'endpoint_not_allowed' end
      end
    end,
  },
})

-- Networks ---------------------------------------------------------------------------------------
local BRIDGE_ICC = 'com.docker.network.bridge.enable_icc'
local BRIDGE_INHIBIT_IPV4 = 'com.docker.network.bridge.inhibit_ipv4'
S.routes.network_create = struct({
  { 'Name', str(network_name, 'network_name_not_allowed'), required = 'network_name_required' },
  -- CheckDuplicate: without it Docker 20.10 makes a second network of an existing name, after which
  -- every call naming it fails as ambiguous.
  { 'CheckDuplicate', bool(true), required = 'check_duplicate_required' },
  -- Bridge only: macvlan, ipvlan, host or overlay reach the host's own interfaces.
  { 'Driver', one_of({ 'bridge' }) },
  { 'Internal', bool() },
  -- Only the two bridge options the controller sets, each "true" or "false": no host interface
  -- name, host bindings, masquerading or MTU.
  { 'Options', map{
    keys = { [BRIDGE_ICC] = true, [BRIDGE_INHIBIT_IPV4] = true },
    value = one_of({ 'true', 'false' }), label = 'Options',
  } },
  { 'Labels', LABELS },
  -- The default IPAM driver, and at most one chosen subnet: a sandbox network's, from the
  -- controller's address pool (its range for dynamic addresses within it). A gateway only at the
  -- subnet's first address (where dockerd puts it anyway; named so that inspect lists it), never
  -- auxiliary addresses (rules below say where a subnet may be chosen at all).
  { 'IPAM', struct({
    { 'Driver', one_of({ 'default' }) },
    { 'Config', list(struct({
      { 'Subnet', str(sandbox_subnet), required = 'bad_value:IPAM.Config.Subnet' },
      { 'IPRange', str(function(v) return cidr(v) ~= nil end) },
      { 'Gateway', str(function(v) return ipv4(v) ~= nil end) },
    }, {
      prefix = 'IPAM.Config.',
      rules = {
        function(c)
          if c.IPRange == nil then return nil end
          local base, prefix = cidr(c.IPRange)
          local sbase, sprefix = cidr(c.Subnet)
          if not inside(base, prefix, sbase, sprefix) then return 'bad_value:IPAM.Config.IPRange' end
        end,
        function(c)
          if c.Gateway == nil then return nil end
          local sbase = cidr(c.Subnet)
          if ipv4(c.Gateway) ~= sbase + 1 then return 'bad_value:IPAM.Config.Gateway' end
        end,
      },
    }), 1, 1) },
  }, { prefix = 'IPAM.' }) },
}, {
  rules = {
    function(n, s)
      local options = n.Options or {}
      local chosen_subnet = n.IPAM ~= nil and n.IPAM.Config ~= nil
      if n.Name == s.shared_network then
        -- The shared network holds the egress proxies (and open sandboxes) of every tenant:
        -- inter-container traffic off, always ("true" let one tenant's container reach another's
        -- ports). Its members are the way out, so it keeps its route and host address, and its
        -- subnet comes from dockerd's pools.
        if options[BRIDGE_ICC] ~= 'false' then return 'network_option_required:enable_icc' end
        if options[BRIDGE_INHIBIT_IPV4] ~= nil then return 'network_option_not_allowed:inhibit_ipv4' end
        if n.Internal == true then return 'network_option_not_allowed:Internal' end
        if chosen_subnet then return 'subnet_not_internal' end
        return nil
      end
      -- Every other network is a sandbox's: internal (no route out, no NAT).
      if n.Internal ~= true then return 'network_option_required:Internal' end
      -- A chosen subnet only on a bridge without a host address as well: the host then has no
      -- route into it, so no subnet, however chosen, captures traffic of the host or its networks.
      if chosen_subnet and options[BRIDGE_INHIBIT_IPV4] ~= 'true' then return 'network_option_required:inhibit_ipv4' end
    end,
  },
})

-- A sandbox's egress proxy name, cap-<id>-egress (at most 64 characters), as the alias a shard of
-- the shared egress takes on that sandbox's network: the sandbox dials its proxy by that name
-- whichever container serves it. Docker's embedded DNS answers an alias on its network before it
-- asks any server, so an alias is a name taken from everyone there: only this shape, one label
-- without ".", which can shadow no public host name (pypi.org, a registry) and no sandbox's own
-- container (no sandbox id ends in "-egress").
local function egress_alias(v)
  return #v <= 64 and v:find('^cap%-[A-Za-z0-9][A-Za-z0-9_%-]*%-egress$') ~= nil
end

-- The egress proxy's second leg: one cap- container and, on a sandbox network, its fixed address
-- there (dockerd takes only an address inside the network's own subnet, which is private) and, for
-- a shard of the shared egress, one alias: the sandbox's egress proxy name. An alias only beside
-- the address (IPAMConfig is required in any EndpointConfig). No MAC, driver option, links or
-- network id.
S.routes.network_connect = struct({
  { 'Container', str(cap_name), required = 'connect_shape' },
  { 'EndpointConfig', struct({
    { 'IPAMConfig', struct({
      { 'IPv4Address', str(private_ipv4), required = 'connect_shape' },
    }, { prefix = 'EndpointConfig.IPAMConfig.' }), required = 'connect_shape' },
    { 'Aliases', list(str(egress_alias), 1, 1) },
  }, { prefix = 'EndpointConfig.' }) },
})

-- A shard's leg taken off a sandbox network before the network is removed (dockerd refuses to
-- remove a network with an endpoint on it): one cap- container; Force (true lets dockerd drop the
-- endpoint of a stopped container too).
S.routes.network_disconnect = struct({
  { 'Container', str(cap_name), required = 'disconnect_shape' },
  { 'Force', bool() },
})

-- Volumes ----------------------------------------------------------------------------------------
S.routes.volume_create = struct({
  { 'Name', str(cap_name), required = 'volume_name_required' },
  -- To dockerd a driver name is a path to a plugin socket (/run/docker/plugins/<name>.sock): only
  -- "local" or exactly a plugin the operator named (SOCKET_PROXY_VOLUME_DRIVERS).
  { 'Driver', str(function(v, s) return v == 'local' or s.volume_drivers[v] == true end) },
  -- size only: the local driver's type/o/device bind a host path or mount a network share.
  { 'DriverOpts', map{ keys = { size = true }, value = str('^[0-9]+[A-Za-z]?$'), label = 'DriverOpts' } },
  { 'Labels', LABELS },
})

-- Exec --------------------------------------------------------------------------------------------
-- Commands and their environment may carry any UTF-8: they are the caller's own data.
S.routes.exec_create = struct({
  { 'Cmd', list(text(), 1, 1024), required = 'bad_value:Cmd' },
  { 'AttachStdin', bool() },
  { 'AttachStdout', bool() },
  { 'AttachStderr', bool() },
  { 'Tty', bool() },
  { 'User', str(user) },
  { 'Env', list(text(), 0, 1024) },
  { 'Privileged', bool(false) },
})

S.routes.exec_start = struct({
  { 'Detach', bool() },
  { 'Tty', bool() },
})

-- Routes whose values are plain ASCII throughout (no \u escape, no byte above 0x7e): what the
-- controller sends, and the only way a value means exactly its bytes to every reader.
S.plain_routes = {
  container_create = true, network_create = true, network_connect = true, network_disconnect = true,
  volume_create = true,
}

return S
