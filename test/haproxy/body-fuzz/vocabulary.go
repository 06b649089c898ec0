package main

// Docker's own API, read from its Go types (the engine's version, Debian's
// golang-github-docker-docker-dev): every JSON member name of every request type the socket proxy
// forwards, and a value of the right Go type for each, so that the fuzzer speaks the whole API,
// not only what the controller sends.

import (
	"math/rand"
	"reflect"
	"strings"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/runconfig"
)

// fieldSet: the JSON members of one struct, as encoding/json names them (embedded structs
// promoted), with their Go types.
type fieldSet map[string]reflect.Type

func jsonFields(t reflect.Type, out fieldSet) fieldSet {
	for t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name := strings.Split(tag, ",")[0]
		if tag == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			jsonFields(f.Type, out)
			continue
		}
		if f.PkgPath != "" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, seen := out[name]; !seen {
			out[name] = f.Type
		}
	}
	return out
}

// routeTypes: the Go type dockerd decodes each route's body into.
var routeTypes = map[string]reflect.Type{
	"container_create":   reflect.TypeOf(runconfig.ContainerConfigWrapper{}),
	"network_create":     reflect.TypeOf(types.NetworkCreateRequest{}),
	"network_connect":    reflect.TypeOf(types.NetworkConnect{}),
	"network_disconnect": reflect.TypeOf(types.NetworkDisconnect{}),
	"volume_create":      reflect.TypeOf(volume.VolumeCreateBody{}),
	"exec_create":        reflect.TypeOf(types.ExecConfig{}),
	"exec_start":         reflect.TypeOf(types.ExecStartCheck{}),
}

// allKeys: every member name of every struct reachable from the request types.
var allKeys []string

// fieldsOf: the members of a struct type by its Go name, for inserting a member where Docker reads it.
var fieldsOf = map[reflect.Type]fieldSet{}

func init() {
	seen := map[string]bool{}
	var walk func(t reflect.Type)
	visited := map[reflect.Type]bool{}
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Ptr || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || visited[t] {
			return
		}
		visited[t] = true
		fs := jsonFields(t, fieldSet{})
		fieldsOf[t] = fs
		for name, ft := range fs {
			if !seen[name] {
				seen[name] = true
				allKeys = append(allKeys, name)
			}
			walk(ft)
		}
	}
	for _, t := range routeTypes {
		walk(t)
	}
	for _, t := range []reflect.Type{reflect.TypeOf(container.HostConfig{}), reflect.TypeOf(mount.Mount{}), reflect.TypeOf(network.EndpointSettings{})} {
		walk(t)
	}
}

// Strings worth trying anywhere: every value a rule looks for, and its near misses.
var interesting = []string{
	"", "none", "NONE", "host", "bridge", "default", "container:cap-fz-a", "private", "shareable", "cap-fz-a",
	"cap-", "cap-fz-a/../x", "capybara-sandbox", "capybara-sandbox_default", "capshared", "ALL", "all", "NET_RAW",
	"no-new-privileges", "no-new-privileges:true", "no-new-privileges=true", "no-new-privileges:false",
	"seccomp=unconfined", "apparmor=unconfined", "json-file", "local", "LOCAL", "syslog", "/", "/tmp", "/data",
	"/var/run/docker.sock", "../../../x", "runc", "runsc", "10m", "100m", "101m", "-1", "1", "5", "6", "2g",
	"rw,nosuid,nodev", "rw,nosuid,nodev,suid", "nosuid,nodev,dev", "rw", "true", "false", "volume", "tmpfs",
	"bind", "npipe", "0:0", "1000:1000", "root", "capytestdriver", "capytestdriver/../x", "size", "10M",
	"com.docker.network.bridge.enable_icc", "com.docker.network.bridge.inhibit_ipv4", "unless-stopped", "no", "always",
	"img:1", "/w", "/w/x", "nosuid,nodev,size=8g", "nosuid,nodev,size=9g", "nosuid,nodev,size=65536k",
	"caf\u00e9", "\u212a", "\u017f", "\u0000", "line\nbreak", "tab\there", "quote\"", "back\\slash",
	"net.ipv4.ip_forward", "NET.IPV4.IP_FORWARD", "net.ipv6.conf.all.disable_ipv6", "net.ipv4.ping_group_range", "0",
}

// Near misses of what each security-relevant member may hold, tried there more often.
var valuesByKey = map[string][]string{
	"NetworkMode":  {"none", "host", "bridge", "default", "container:cap-fz-a", "cap-fz-net", "capshared", "capsharedx", "cap", "cafe", "NONE", ""},
	"CapDrop":      {"ALL", "all", "NET_RAW", "CHOWN", ""},
	"SecurityOpt":  {"no-new-privileges", "no-new-privileges:true", "no-new-privileges=true", "no-new-privileges:false", "no-new-privileges=1", "seccomp=unconfined", "apparmor=unconfined", "label=disable", "label:disable"},
	"IpcMode":      {"private", "shareable", "host", "none", "container:cap-fz-a", ""},
	"CgroupnsMode": {"private", "host", "", "PRIVATE"},
	"Runtime":      {"runc", "runsc", "io.containerd.runc.v2", "RUNC", ""},
	"Type":         {"volume", "tmpfs", "bind", "npipe", "cluster", "json-file", "local", "syslog", "journald", "none", ""},
	"Source":       {"cap-fz-v", "cap-", "/", "/var/run/docker.sock", "other", ""},
	"Driver":       {"local", "capytestdriver", "capytestdriver/../x", "../../x", "/x", "LOCAL", "bridge", "host", "macvlan", "default", ""},
	"Name":         {"cap-fz-x", "capshared", "capsharedx", "cap-", "evil", "no", "always", "unless-stopped", ""},
	"Container":    {"cap-fz-a", "evil", "cap-", "cap-fz-a/x"},
	"Target":       {"/x", "/", "/proc", "/../x", "/a:b", "relative", "/workspace", "/workspace/x", "/tmp", "/tmp/x", "/x/y", "/usr/", "//proc", "/dev/shm", "/sys/fs/cgroup", "/proc/sys", "/./x"},
	"Image":        {"img:1", "img", "img:latest", "img:2", "capybara-sandbox:latest", "capybara-sandbox", "2c7b847d", "sha256:2c7b", "127.0.0.1:5000/x", "localhost/x", "alpine:3.19", "docker.io/library/img:1", "IMG:1", ""},

	"max-size": {"10m", "100m", "101m", "104857600", "104857601", "1g", "-1", "0", "10M"},
	"max-file": {"1", "5", "6", "0", "-1", "05"},
	"User":     {"0:0", "1000:1000", "root", "1000", "0:0:0", ""},
}

// Numbers at and past the ceilings of the members that have one (the proxy's defaults).
var numbersByKey = map[string][]string{
	"SizeBytes":  {"0", "1", "65536", "8589934592", "8589934593", "-1"},
	"PidsLimit":  {"1", "1024", "1025", "0", "-1", "4194304"},
	"Memory":     {"268435456", "17179869184", "17179869185", "0", "-1"},
	"MemorySwap": {"268435456", "17179869184", "-1", "0"},
	"NanoCpus":   {"1000000000", "4000000000", "4000000001", "0", "-1"},
}

var ints = []string{"0", "1", "-1", "2", "5", "60", "61", "256", "1024", "4095", "4096", "268435456", "536870912",
	"9007199254740993", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1.0", "1e3", "-0",
	"0.5", "1E2", "01", "+1"}

func pick(r *rand.Rand, xs []string) string { return xs[r.Intn(len(xs))] }

// valueFor: a value of Go type t (or, now and then, of any type), `depth` levels at most.
func valueFor(r *rand.Rand, t reflect.Type, depth int) *node {
	if t == nil || r.Intn(8) == 0 {
		return anyValue(r, depth)
	}
	for t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return str(pick(r, interesting))
	case reflect.Bool:
		return boolean(r.Intn(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
		reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return num(pick(r, ints))
	case reflect.Slice, reflect.Array:
		n := &node{kind: 'a'}
		if t.Name() == "StrSlice" || t.Elem().Kind() == reflect.String {
			for i := r.Intn(3); i >= 0; i-- {
				n.items = append(n.items, str(pick(r, interesting)))
			}
			return n
		}
		if depth > 0 {
			for i := r.Intn(2); i >= 0; i-- {
				n.items = append(n.items, valueFor(r, t.Elem(), depth-1))
			}
		}
		return n
	case reflect.Map:
		n := &node{kind: 'o'}
		for i := r.Intn(3); i > 0; i-- {
			n.keys = append(n.keys, escape(pick(r, interesting)))
			if depth > 0 {
				n.vals = append(n.vals, valueFor(r, t.Elem(), depth-1))
			} else {
				n.vals = append(n.vals, str("x"))
			}
		}
		return n
	case reflect.Struct:
		n := &node{kind: 'o'}
		fs := jsonFields(t, fieldSet{})
		if depth <= 0 || len(fs) == 0 {
			return n
		}
		names := make([]string, 0, len(fs))
		for k := range fs {
			names = append(names, k)
		}
		for i := r.Intn(3); i >= 0; i-- {
			k := names[r.Intn(len(names))]
			n.keys = append(n.keys, escape(k))
			n.vals = append(n.vals, valueFor(r, fs[k], depth-1))
		}
		return n
	}
	return anyValue(r, depth)
}

func anyValue(r *rand.Rand, depth int) *node {
	switch r.Intn(7) {
	case 0:
		return str(pick(r, interesting))
	case 1:
		return num(pick(r, ints))
	case 2:
		return boolean(r.Intn(2) == 0)
	case 3:
		return null()
	case 4:
		if depth > 0 {
			return &node{kind: 'a', items: []*node{anyValue(r, depth-1)}}
		}
		return &node{kind: 'a'}
	default:
		n := &node{kind: 'o'}
		if depth > 0 {
			n.keys = []string{escape(pick(r, allKeys))}
			n.vals = []*node{anyValue(r, depth-1)}
		}
		return n
	}
}
