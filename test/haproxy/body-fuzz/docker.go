package main

// How dockerd reads a body: the engine's own decoders (runconfig's ContainerDecoder for a
// container create, encoding/json into the route's API type for the rest), turned into a
// comparable view with every zero value dropped (Go cannot tell a zero value from an absent one).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/pkg/sysinfo"
	"github.com/docker/docker/runconfig"
)

// A fixed description of the engine host: the decoder only reads it to refuse real-time CPU
// settings, which no allowed body carries.
var sysInfo = &sysinfo.SysInfo{}

type decoded struct {
	config     *container.Config
	hostConfig *container.HostConfig
	networking *network.NetworkingConfig
	other      interface{}
}

func decode(route string, body []byte) (*decoded, error) {
	if route == "container_create" {
		c, hc, nc, err := runconfig.ContainerDecoder{GetSysInfo: func() *sysinfo.SysInfo { return sysInfo }}.DecodeConfig(bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		return &decoded{config: c, hostConfig: hc, networking: nc}, nil
	}
	var v interface{}
	switch route {
	case "network_create":
		v = &types.NetworkCreateRequest{}
	case "network_connect":
		v = &types.NetworkConnect{}
	case "network_disconnect":
		v = &types.NetworkDisconnect{}
	case "volume_create":
		v = &volume.VolumeCreateBody{}
	case "exec_create":
		v = &types.ExecConfig{}
	case "exec_start":
		v = &types.ExecStartCheck{}
	default:
		return nil, fmt.Errorf("no decoder for %s", route)
	}
	// As the routers do: one JSON value from the body, the rest unread.
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(v); err != nil {
		return nil, err
	}
	return &decoded{other: v}, nil
}

func generic(v interface{}) interface{} {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out interface{}
	if err := dec.Decode(&out); err != nil {
		panic(err)
	}
	return out
}

// view: what Docker read, as one JSON-like value shaped like the request body.
func (d *decoded) view() interface{} {
	if d.other != nil {
		return generic(d.other)
	}
	top := map[string]interface{}{}
	if d.config != nil {
		if m, ok := generic(d.config).(map[string]interface{}); ok {
			top = m
		}
	}
	if d.hostConfig != nil {
		top["HostConfig"] = generic(d.hostConfig)
	}
	if d.networking != nil {
		top["NetworkingConfig"] = generic(d.networking)
	}
	return top
}

func isZero(v interface{}) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case json.Number:
		return x == "0"
	case map[string]interface{}:
		return len(x) == 0
	case []interface{}:
		return len(x) == 0
	}
	return false
}

// normalise drops zero values, and arrays whose items are all zero, except that an endpoint
// stays (its name is what matters) as `true`.
func normalise(v interface{}, key string) interface{} {
	switch x := v.(type) {
	case map[string]interface{}:
		out := map[string]interface{}{}
		for k, val := range x {
			nv := normalise(val, k)
			if key == "EndpointsConfig" && isZero(nv) {
				nv = true
			}
			if !isZero(nv) {
				out[k] = nv
			}
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(x))
		allZero := true
		for i, val := range x {
			out[i] = normalise(val, "")
			if !isZero(out[i]) {
				allZero = false
			}
		}
		if allZero {
			return []interface{}{}
		}
		return out
	}
	return v
}

func sameReading(luaView []byte, d *decoded) (bool, interface{}, interface{}) {
	dec := json.NewDecoder(bytes.NewReader(luaView))
	dec.UseNumber()
	var lv interface{}
	if err := dec.Decode(&lv); err != nil {
		return false, fmt.Sprintf("unreadable view: %v", err), nil
	}
	a, b := normalise(lv, ""), normalise(d.view(), "")
	return reflect.DeepEqual(a, b), a, b
}
