package main

// The socket proxy's policy restated on Docker's own reading of a body (independent of the Lua
// schema): what a body the proxy allowed may make dockerd do. A body that passes the proxy and
// breaks one of these is a finding even when both readers agree.

import (
	"fmt"
	"net"
	"path"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/volume"
)

var capName = regexp.MustCompile(`^cap-[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// A sandbox's egress proxy name (cap-<id>-egress), the one alias a shard's leg may carry: one DNS
// label, never a public host name or a sandbox container's name.
var egressAlias = regexp.MustCompile(`^cap-[a-zA-Z0-9][a-zA-Z0-9_-]*-egress$`)

type settings struct {
	sharedNetwork string
	volumeDrivers map[string]bool
	// SOCKET_PROXY_IMAGES as the proxy reads it: each listed name, and a name without tag or
	// digest also with ":latest" (no registry is listed in the fuzz run).
	images map[string]bool
	// The default ceilings (proxy-settings.lua DEFAULTS): 1024 pids, 16384 MiB, 4 CPUs; a tmpfs
	// at most half the memory ceiling.
	maxPids, maxMemory, maxNanoCPUs, maxTmpfs int64
}

func newSettings(shared, drivers, images string) settings {
	s := settings{sharedNetwork: shared, volumeDrivers: map[string]bool{}, images: map[string]bool{},
		maxPids: 1024, maxMemory: 16384 << 20, maxNanoCPUs: 4e9, maxTmpfs: 16384 << 19}
	for _, d := range strings.Split(drivers, ",") {
		if d != "" {
			s.volumeDrivers[d] = true
		}
	}
	for _, i := range strings.Split(images, ",") {
		if i == "" {
			continue
		}
		s.images[i] = true
		if !strings.Contains(i, "@") && !strings.Contains(i[strings.LastIndex(i, "/")+1:], ":") {
			s.images[i+":latest"] = true
		}
	}
	return s
}

// Where the controller mounts volumes (haproxy/docker-schema.lua S.VOLUME_TARGETS).
var controllerVolumeTargets = map[string]bool{"/workspace": true, "/skills": true, "/opt/capybara/skills": true, "/var/lib/capybara-egress/tenants": true}

// A mount target dockerd and runc may act on: a clean absolute path (what path.Clean keeps), not
// "/", and never /proc, /sys, /dev or below them.
func mountTargetOK(target string) bool {
	if !strings.HasPrefix(target, "/") || target == "/" || path.Clean(target) != target {
		return false
	}
	for _, denied := range []string{"/proc", "/sys", "/dev"} {
		if target == denied || strings.HasPrefix(target, denied+"/") {
			return false
		}
	}
	return true
}

// tmpfsSize: the size= option of a HostConfig.Tmpfs value in bytes (0: none given).
func tmpfsSize(opts string) (int64, bool) {
	var size int64
	for _, o := range strings.Split(opts, ",") {
		if !strings.HasPrefix(o, "size=") {
			continue
		}
		v := strings.TrimPrefix(o, "size=")
		unit := int64(1)
		switch {
		case strings.HasSuffix(v, "k"):
			unit, v = 1<<10, v[:len(v)-1]
		case strings.HasSuffix(v, "m"):
			unit, v = 1<<20, v[:len(v)-1]
		case strings.HasSuffix(v, "g"):
			unit, v = 1<<30, v[:len(v)-1]
		}
		// The kernel reads a leading zero as octal (memparse: strtoull, base 0): refused.
		if len(v) > 1 && v[0] == '0' {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > (1<<62)/unit {
			return 0, false
		}
		size = n * unit
	}
	return size, true
}

func (s settings) network(name string) bool {
	return capName.MatchString(name) || name == s.sharedNetwork
}

// A full network id: the proxy asks dockerd what it names and admits only a network network()
// admits (network-proof.lua); here it stands for such a network.
var networkID = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s settings) joinable(name string) bool { return s.network(name) || networkID.MatchString(name) }

// RFC 1918.
var private = []*net.IPNet{mustCIDR("10.0.0.0/8"), mustCIDR("172.16.0.0/12"), mustCIDR("192.168.0.0/16")}

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

func privateIP(ip net.IP) bool {
	for _, p := range private {
		if ip.To4() != nil && p.Contains(ip) {
			return true
		}
	}
	return false
}

// A sandbox network's subnet: private IPv4, /24 to /29, canonical.
// The egress proxy's address as a sandbox's name server: one private IPv4 address, written as Go's
// parser reads it back the same (no leading zeros, no IPv6 form).
func dnsServerOK(text string) bool {
	ip := net.ParseIP(text)
	return ip != nil && ip.To4() != nil && ip.String() == text && privateIP(ip)
}

func sandboxSubnet(s string) (*net.IPNet, bool) {
	ip, n, err := net.ParseCIDR(s)
	if err != nil || ip.To4() == nil || !ip.Equal(n.IP) || n.String() != s {
		return nil, false
	}
	ones, _ := n.Mask.Size()
	last := make(net.IP, 4)
	for i := range last {
		last[i] = n.IP.To4()[i] | ^n.Mask[i]
	}
	return n, ones >= 24 && ones <= 29 && privateIP(n.IP) && privateIP(last)
}

// firstAddress: the subnet's first address after its base, where dockerd puts a gateway.
func firstAddress(n *net.IPNet) string {
	ip := make(net.IP, 4)
	copy(ip, n.IP.To4())
	ip[3]++
	return ip.String()
}

// onlyFields: every field of the struct not named is its zero value.
func onlyFields(v interface{}, allowed ...string) error {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Ptr {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	return zeroExcept(rv, ok)
}

func zeroExcept(rv reflect.Value, ok map[string]bool) error {
	t := rv.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			if err := zeroExcept(rv.Field(i), ok); err != nil {
				return err
			}
			continue
		}
		if f.PkgPath != "" || ok[f.Name] {
			continue
		}
		if !rv.Field(i).IsZero() {
			// An empty map or slice reads as nothing to Docker.
			fv := rv.Field(i)
			if (fv.Kind() == reflect.Map || fv.Kind() == reflect.Slice) && fv.Len() == 0 {
				continue
			}
			return fmt.Errorf("%s is set (%v)", f.Name, fv.Interface())
		}
	}
	return nil
}

var nnp = map[string]bool{"no-new-privileges": true, "no-new-privileges:true": true, "no-new-privileges=true": true}

func logSize(v string) (int64, bool) {
	unit := int64(1)
	switch {
	case strings.HasSuffix(v, "k"):
		unit, v = 1024, v[:len(v)-1]
	case strings.HasSuffix(v, "m"):
		unit, v = 1024*1024, v[:len(v)-1]
	case strings.HasSuffix(v, "g"):
		unit, v = 1024*1024*1024, v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n * unit, err == nil && n > 0
}

func tmpfsOK(opts string) bool {
	has := map[string]bool{}
	for _, o := range strings.Split(opts, ",") {
		has[o] = true
	}
	return has["nosuid"] && has["nodev"] && !has["suid"] && !has["dev"]
}

// policy: nil when what Docker read is within the proxy's promise.
func policy(route string, d *decoded, s settings) error {
	switch route {
	case "container_create":
		c, hc, nc := d.config, d.hostConfig, d.networking
		if hc == nil {
			return fmt.Errorf("no HostConfig")
		}
		if c == nil || !s.images[c.Image] {
			return fmt.Errorf("image not listed")
		}
		if err := onlyFields(c, "Image", "User", "Entrypoint", "Cmd", "WorkingDir", "Env", "Labels", "Volumes", "Healthcheck"); err != nil {
			return err
		}
		// At most the image's health check turned off: never a command of the caller's.
		if h := c.Healthcheck; h != nil {
			if err := onlyFields(h, "Test"); err != nil || len(h.Test) != 1 || h.Test[0] != "NONE" {
				return fmt.Errorf("Healthcheck %+v", h)
			}
		}
		if len(c.Volumes) > 0 {
			return fmt.Errorf("anonymous volumes %v", c.Volumes)
		}
		// A clean working directory outside /proc, /sys and /dev: dockerd cleans it, so "//proc/x"
		// is /proc/x to runc (CVE-2024-21626).
		if c.WorkingDir != "" && c.WorkingDir != "/" && !mountTargetOK(c.WorkingDir) {
			return fmt.Errorf("WorkingDir %q", c.WorkingDir)
		}
		if err := onlyFields(hc, "NetworkMode", "CapDrop", "SecurityOpt", "ReadonlyRootfs", "PidsLimit", "Memory", "MemorySwap",
			"CgroupnsMode", "IpcMode", "NanoCPUs", "Init", "RestartPolicy", "Tmpfs", "Mounts", "Runtime", "Privileged",
			"OomScoreAdj", "LogConfig", "DNS", "Sysctls"); err != nil {
			return err
		}
		// IPv4 forwarding off, and nothing else: what Docker reads as the one kernel setting allowed.
		for key, value := range hc.Sysctls {
			if key != "net.ipv4.ip_forward" || value != "0" {
				return fmt.Errorf("Sysctls %v", hc.Sysctls)
			}
		}
		mode := string(hc.NetworkMode)
		switch {
		case mode != "none" && !s.joinable(mode):
			return fmt.Errorf("NetworkMode %q", mode)
		case len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL":
			return fmt.Errorf("CapDrop %v", hc.CapDrop)
		case len(hc.SecurityOpt) != 1 || !nnp[hc.SecurityOpt[0]]:
			return fmt.Errorf("SecurityOpt %v", hc.SecurityOpt)
		case !hc.ReadonlyRootfs:
			return fmt.Errorf("writable root")
		case hc.PidsLimit == nil || *hc.PidsLimit <= 0 || *hc.PidsLimit > s.maxPids:
			return fmt.Errorf("pids limit %v", hc.PidsLimit)
		case hc.Memory <= 0 || hc.Memory > s.maxMemory || (hc.MemorySwap != 0 && hc.MemorySwap != hc.Memory):
			return fmt.Errorf("Memory %d MemorySwap %d", hc.Memory, hc.MemorySwap)
		case hc.NanoCPUs < 0 || hc.NanoCPUs > s.maxNanoCPUs:
			return fmt.Errorf("NanoCpus %d", hc.NanoCPUs)
		case hc.CgroupnsMode != "private":
			return fmt.Errorf("CgroupnsMode %q", hc.CgroupnsMode)
		case hc.IpcMode != "" && hc.IpcMode != "private":
			return fmt.Errorf("IpcMode %q", hc.IpcMode)
		case hc.Privileged:
			return fmt.Errorf("privileged")
		case hc.OomScoreAdj < 0:
			return fmt.Errorf("OomScoreAdj %d", hc.OomScoreAdj)
		case hc.DNS != nil && (len(hc.DNS) != 1 || !dnsServerOK(hc.DNS[0])):
			return fmt.Errorf("Dns %q", hc.DNS)
		case hc.Runtime != "" && hc.Runtime != "runc" && hc.Runtime != "runsc":
			return fmt.Errorf("Runtime %q", hc.Runtime)
		case hc.RestartPolicy.Name != "" && hc.RestartPolicy.Name != "no" && hc.RestartPolicy.Name != "on-failure",
			hc.RestartPolicy.MaximumRetryCount != 0:
			return fmt.Errorf("RestartPolicy %v", hc.RestartPolicy)
		}
		if hc.LogConfig.Type != "" || len(hc.LogConfig.Config) > 0 {
			size, ok := logSize(hc.LogConfig.Config["max-size"])
			files := hc.LogConfig.Config["max-file"]
			if (hc.LogConfig.Type != "json-file" && hc.LogConfig.Type != "local") || !ok || size > 100*1024*1024 {
				return fmt.Errorf("LogConfig %v", hc.LogConfig)
			}
			if n, err := strconv.Atoi(files); files != "" && (err != nil || n < 1 || n > 5) {
				return fmt.Errorf("LogConfig %v", hc.LogConfig)
			}
			for k := range hc.LogConfig.Config {
				if k != "max-size" && k != "max-file" {
					return fmt.Errorf("LogConfig option %q", k)
				}
			}
		}
		var targets, volumes []string
		for target, opts := range hc.Tmpfs {
			size, ok := tmpfsSize(opts)
			if !tmpfsOK(opts) || !ok || size > s.maxTmpfs || !mountTargetOK(target) {
				return fmt.Errorf("Tmpfs %s %q", target, opts)
			}
			targets = append(targets, target)
		}
		for _, m := range hc.Mounts {
			if m.BindOptions != nil || m.Consistency != "" || !mountTargetOK(m.Target) {
				return fmt.Errorf("mount %+v", m)
			}
			targets = append(targets, m.Target)
			switch m.Type {
			case "volume":
				// NoCopy, and nothing else: dockerd copies the image into an empty volume otherwise.
				v := m.VolumeOptions
				if !capName.MatchString(m.Source) || v == nil || !v.NoCopy || len(v.Labels) > 0 || v.DriverConfig != nil || m.TmpfsOptions != nil {
					return fmt.Errorf("volume mount %+v (options %+v)", m, v)
				}
				volumes = append(volumes, m.Target)
			case "tmpfs":
				if m.Source != "" || m.VolumeOptions != nil {
					return fmt.Errorf("tmpfs mount %+v", m)
				}
				if t := m.TmpfsOptions; t != nil && (t.SizeBytes < 0 || t.SizeBytes > s.maxTmpfs) {
					return fmt.Errorf("tmpfs size %d", t.SizeBytes)
				}
			default:
				return fmt.Errorf("mount type %q", m.Type)
			}
		}
		// Nothing mounted inside a volume: its content is the caller's. Nor a second mount at a
		// volume's own target (a tmpfs over it).
		for _, v := range volumes {
			at := 0
			for _, target := range targets {
				if strings.HasPrefix(target, v+"/") {
					return fmt.Errorf("%s mounted inside the volume at %s", target, v)
				}
				if target == v {
					at++
				}
			}
			if at > 1 {
				return fmt.Errorf("%d mounts at the volume's target %s", at, v)
			}
		}
		// The image's symlinks can nest what the text does not: with several volumes, only where
		// the controller puts them; never one at /etc (dockerd's hosts and resolv.conf go there).
		for _, v := range volumes {
			if v == "/etc" || (len(volumes) > 1 && !controllerVolumeTargets[v]) {
				return fmt.Errorf("volume at %s beside %d volumes", v, len(volumes)-1)
			}
		}
		if nc != nil {
			if len(nc.EndpointsConfig) > 1 {
				return fmt.Errorf("%d endpoints", len(nc.EndpointsConfig))
			}
			for name, ep := range nc.EndpointsConfig {
				if name != mode {
					return fmt.Errorf("endpoint %q beside NetworkMode %q", name, mode)
				}
				if err := onlyFields(ep); err != nil {
					return fmt.Errorf("endpoint settings: %v", err)
				}
			}
		}
	case "volume_create":
		v := d.other.(*volume.VolumeCreateBody)
		if !capName.MatchString(v.Name) {
			return fmt.Errorf("volume name %q", v.Name)
		}
		// No driver is the local one.
		if v.Driver != "" && v.Driver != "local" && !s.volumeDrivers[v.Driver] {
			return fmt.Errorf("volume driver %q", v.Driver)
		}
		for k := range v.DriverOpts {
			if k != "size" {
				return fmt.Errorf("driver option %q", k)
			}
		}
	case "network_create":
		n := d.other.(*types.NetworkCreateRequest)
		if err := onlyFields(n, "Name", "CheckDuplicate", "Driver", "Internal", "Options", "Labels", "IPAM"); err != nil {
			return err
		}
		if !s.network(n.Name) || !n.CheckDuplicate || (n.Driver != "bridge" && n.Driver != "") {
			return fmt.Errorf("network %q driver %q checkDuplicate %v", n.Name, n.Driver, n.CheckDuplicate)
		}
		if n.IPAM != nil && (n.IPAM.Driver != "default" && n.IPAM.Driver != "" || len(n.IPAM.Config) > 1 || len(n.IPAM.Options) > 0) {
			return fmt.Errorf("IPAM %+v", n.IPAM)
		}
		if n.IPAM != nil && len(n.IPAM.Config) == 1 {
			c := n.IPAM.Config[0]
			subnet, ok := sandboxSubnet(c.Subnet)
			if !ok || (c.Gateway != "" && c.Gateway != firstAddress(subnet)) || len(c.AuxAddress) > 0 {
				return fmt.Errorf("IPAM config %+v", c)
			}
			if c.IPRange != "" {
				rip, r, err := net.ParseCIDR(c.IPRange)
				rOnes, _ := r.Mask.Size()
				sOnes, _ := subnet.Mask.Size()
				if err != nil || !subnet.Contains(rip) || rOnes < sOnes {
					return fmt.Errorf("IPAM range %q in %q", c.IPRange, c.Subnet)
				}
			}
			// A chosen subnet only where the host has no route into it.
			if !n.Internal || n.Options["com.docker.network.bridge.inhibit_ipv4"] != "true" {
				return fmt.Errorf("subnet %q on a network the host routes into", c.Subnet)
			}
		}
		if n.Name == s.sharedNetwork {
			// The way out of every tenant: no traffic between its members, a route and NAT out.
			_, inhibit := n.Options["com.docker.network.bridge.inhibit_ipv4"]
			if n.Options["com.docker.network.bridge.enable_icc"] != "false" || inhibit || n.Internal || (n.IPAM != nil && len(n.IPAM.Config) > 0) {
				return fmt.Errorf("shared network %+v", n)
			}
		} else if !n.Internal {
			return fmt.Errorf("sandbox network %q not internal", n.Name)
		}
		for k, v := range n.Options {
			if (k != "com.docker.network.bridge.enable_icc" && k != "com.docker.network.bridge.inhibit_ipv4") || (v != "true" && v != "false") {
				return fmt.Errorf("network option %q=%q", k, v)
			}
		}
	case "network_connect":
		n := d.other.(*types.NetworkConnect)
		if !capName.MatchString(n.Container) {
			return fmt.Errorf("connect %+v", n)
		}
		// At most a fixed private IPv4 address and, beside it, one egress proxy name as an alias:
		// no link, MAC, driver option or network id.
		if ep := n.EndpointConfig; ep != nil {
			if err := onlyFields(ep, "IPAMConfig", "Aliases"); err != nil {
				return fmt.Errorf("connect endpoint: %v", err)
			}
			if ep.Aliases != nil && (len(ep.Aliases) != 1 || len(ep.Aliases[0]) > 64 || !egressAlias.MatchString(ep.Aliases[0]) || ep.IPAMConfig == nil) {
				return fmt.Errorf("connect aliases %q", ep.Aliases)
			}
			if ep.IPAMConfig != nil {
				if err := onlyFields(ep.IPAMConfig, "IPv4Address"); err != nil {
					return fmt.Errorf("connect address: %v", err)
				}
				if ip := net.ParseIP(ep.IPAMConfig.IPv4Address); ip == nil || !privateIP(ip) {
					return fmt.Errorf("connect address %q", ep.IPAMConfig.IPv4Address)
				}
			}
		}
	case "network_disconnect":
		n := d.other.(*types.NetworkDisconnect)
		if !capName.MatchString(n.Container) {
			return fmt.Errorf("disconnect %+v", n)
		}
	case "exec_create":
		e := d.other.(*types.ExecConfig)
		if e.Privileged || e.Detach || e.DetachKeys != "" || e.WorkingDir != "" || len(e.Cmd) == 0 {
			return fmt.Errorf("exec %+v", e)
		}
	}
	return nil
}
