package main

// Mutations of a seed body: keys from Docker's whole API (vocabulary.go) inserted where Docker
// reads them or anywhere, keys in other letter cases, Unicode-folded or escaped, members given
// twice, values of other types or at their edges, breadth and depth past the caps, blanks, and
// raw bytes no JSON allows. Most bodies stay close to a valid one, so that many are allowed and
// the differential has something to compare.

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"unicode"
)

type loc struct {
	n      *node
	typ    reflect.Type // the Go type Docker decodes this value into (nil: not read by Docker)
	parent *node
	index  int    // member or item index in parent
	key    string // the member this value is (or is an item of)
}

// fieldType: the Go type of member key in a value of type t, matched as encoding/json matches
// (exact name first, then ASCII case-insensitively).
func fieldType(t reflect.Type, key string) reflect.Type {
	for t != nil && t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	if t == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Map:
		return t.Elem()
	case reflect.Struct:
		fs := fieldsOf[t]
		if fs == nil {
			fs = jsonFields(t, fieldSet{})
			fieldsOf[t] = fs
		}
		if ft, ok := fs[key]; ok {
			return ft
		}
		for name, ft := range fs {
			if strings.EqualFold(name, key) {
				return ft
			}
		}
	}
	return nil
}

func elemType(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		return t.Elem()
	}
	return nil
}

func collect(n *node, t reflect.Type, parent *node, index int, out []loc) []loc {
	return collectKey(n, t, parent, index, "", out)
}

func collectKey(n *node, t reflect.Type, parent *node, index int, key string, out []loc) []loc {
	out = append(out, loc{n, t, parent, index, key})
	switch n.kind {
	case 'o':
		for i, k := range n.keys {
			out = collectKey(n.vals[i], fieldType(t, k), n, i, k, out)
		}
	case 'a':
		for i, v := range n.items {
			out = collectKey(v, elemType(t), n, i, key, out)
		}
	}
	return out
}

func objects(locs []loc) []loc {
	var out []loc
	for _, l := range locs {
		if l.n.kind == 'o' {
			out = append(out, l)
		}
	}
	return out
}

func members(locs []loc) []loc {
	var out []loc
	for _, l := range locs {
		if l.parent != nil && l.parent.kind == 'o' {
			out = append(out, l)
		}
	}
	return out
}

func replaceAt(l loc, v *node) {
	if l.parent == nil {
		return
	}
	if l.parent.kind == 'o' {
		l.parent.vals[l.index] = v
	} else {
		l.parent.items[l.index] = v
	}
}

func insertMember(r *rand.Rand, o *node, key string, v *node) {
	at := r.Intn(len(o.keys) + 1)
	o.keys = append(o.keys[:at], append([]string{key}, o.keys[at:]...)...)
	o.vals = append(o.vals[:at], append([]*node{v}, o.vals[at:]...)...)
}

func caseVariant(r *rand.Rand, key string) string {
	switch r.Intn(3) {
	case 0:
		return strings.ToLower(key)
	case 1:
		return strings.ToUpper(key)
	}
	b := []byte(key)
	for i := range b {
		if r.Intn(2) == 0 {
			if b[i] >= 'a' && b[i] <= 'z' {
				b[i] -= 32
			} else if b[i] >= 'A' && b[i] <= 'Z' {
				b[i] += 32
			}
		}
	}
	return string(b)
}

// foldVariant: a spelling Go's folding matches and a byte comparison does not: the Kelvin sign
// for k, the long s for s, or one letter written as a \u escape.
func foldVariant(r *rand.Rand, key string) string {
	for tries := 0; tries < 4; tries++ {
		i := r.Intn(len(key) + 1)
		if i >= len(key) {
			continue
		}
		c := key[i]
		switch {
		case (c == 'k' || c == 'K') && r.Intn(2) == 0:
			return key[:i] + "\u212a" + key[i+1:]
		case (c == 's' || c == 'S') && r.Intn(2) == 0:
			return key[:i] + "\u017f" + key[i+1:]
		case unicode.IsLetter(rune(c)):
			return key[:i] + fmt.Sprintf("\\u%04x", c) + key[i+1:]
		}
	}
	return key + "\u212a"
}

// stringVariant: the same text in another JSON spelling, or a near miss of it.
func stringVariant(r *rand.Rand, raw string) string {
	switch r.Intn(6) {
	case 0:
		return strings.ReplaceAll(raw, "/", "\\/")
	case 1:
		if raw == "" {
			return "\\u0041"
		}
		i := r.Intn(len(raw))
		if raw[i] < 0x80 && raw[i] != '\\' && raw[i] != '"' {
			return raw[:i] + fmt.Sprintf("\\u%04x", raw[i]) + raw[i+1:]
		}
		return raw
	case 2:
		return caseVariant(r, raw)
	case 3:
		return raw + pick(r, []string{" ", "x", "/", ".", "-", "\u00e9", "\\n", "\\ud83d\\ude00", "\\ud800"})
	case 4:
		return escape(pick(r, interesting))
	}
	return pick(r, []string{"\\/", "\\u002f", "\\\"", "\\\\"}) + raw
}

var mutations = []func(r *rand.Rand, root *node, t reflect.Type){
	// A member from Docker's API: where Docker reads it (a field of this struct) or anywhere.
	func(r *rand.Rand, root *node, t reflect.Type) {
		objs := objects(collect(root, t, nil, 0, nil))
		o := objs[r.Intn(len(objs))]
		base := o.typ
		for base != nil && base.Kind() == reflect.Ptr {
			base = base.Elem()
		}
		if base != nil && base.Kind() == reflect.Struct && r.Intn(3) > 0 {
			fs := fieldsOf[base]
			if fs == nil {
				fs = jsonFields(base, fieldSet{})
			}
			names := make([]string, 0, len(fs))
			for k := range fs {
				names = append(names, k)
			}
			if len(names) > 0 {
				k := names[r.Intn(len(names))]
				insertMember(r, o.n, escape(k), valueFor(r, fs[k], 2))
				return
			}
		}
		k := pick(r, allKeys)
		insertMember(r, o.n, escape(k), valueFor(r, fieldType(o.typ, k), 2))
	},
	// A key in another letter case, or spelled so that only Unicode folding matches it.
	func(r *rand.Rand, root *node, t reflect.Type) {
		ms := members(collect(root, t, nil, 0, nil))
		if len(ms) == 0 {
			return
		}
		m := ms[r.Intn(len(ms))]
		if r.Intn(3) == 0 {
			m.parent.keys[m.index] = foldVariant(r, m.parent.keys[m.index])
		} else {
			m.parent.keys[m.index] = caseVariant(r, m.parent.keys[m.index])
		}
	},
	// A member given twice: the same key or another spelling, the same value or another.
	func(r *rand.Rand, root *node, t reflect.Type) {
		ms := members(collect(root, t, nil, 0, nil))
		if len(ms) == 0 {
			return
		}
		m := ms[r.Intn(len(ms))]
		key := m.parent.keys[m.index]
		if r.Intn(2) == 0 {
			key = caseVariant(r, key)
		}
		v := m.n.clone()
		if r.Intn(2) == 0 {
			v = valueFor(r, m.typ, 2)
		}
		insertMember(r, m.parent, key, v)
	},
	// A member removed (a required one, now and then).
	func(r *rand.Rand, root *node, t reflect.Type) {
		ms := members(collect(root, t, nil, 0, nil))
		if len(ms) == 0 {
			return
		}
		m := ms[r.Intn(len(ms))]
		p := m.parent
		p.keys = append(p.keys[:m.index], p.keys[m.index+1:]...)
		p.vals = append(p.vals[:m.index], p.vals[m.index+1:]...)
	},
	// A value replaced by one of its Go type (or of any type).
	func(r *rand.Rand, root *node, t reflect.Type) {
		ls := collect(root, t, nil, 0, nil)
		l := ls[r.Intn(len(ls))]
		replaceAt(l, valueFor(r, l.typ, 2))
	},
	// A scalar nudged: another spelling of a string, another number, a flipped boolean.
	func(r *rand.Rand, root *node, t reflect.Type) {
		for _, l := range shuffled(r, collect(root, t, nil, 0, nil)) {
			switch l.n.kind {
			case 's':
				if pool, ok := valuesByKey[l.key]; ok && r.Intn(2) == 0 {
					l.n.raw = escape(pick(r, pool))
				} else {
					l.n.raw = stringVariant(r, l.n.raw)
				}
				return
			case 'n':
				if pool, ok := numbersByKey[l.key]; ok && r.Intn(2) == 0 {
					l.n.raw = pick(r, pool)
				} else {
					l.n.raw = pick(r, ints)
				}
				return
			case 'b':
				l.n.b = !l.n.b
				return
			}
		}
	},
	// Breadth: hundreds of members or items in one place.
	func(r *rand.Rand, root *node, t reflect.Type) {
		ls := collect(root, t, nil, 0, nil)
		var containers []loc
		for _, l := range ls {
			if l.n.kind == 'o' || l.n.kind == 'a' {
				containers = append(containers, l)
			}
		}
		c := containers[r.Intn(len(containers))]
		count := 50 + r.Intn(1200)
		if c.n.kind == 'o' {
			// One block, at one place: before, among or after the members already there.
			at := r.Intn(len(c.n.keys) + 1)
			keys := append([]string{}, c.n.keys[:at]...)
			vals := append([]*node{}, c.n.vals[:at]...)
			for i := 0; i < count; i++ {
				keys = append(keys, fmt.Sprintf("x%d", i))
				vals = append(vals, num("1"))
			}
			c.n.keys = append(keys, c.n.keys[at:]...)
			c.n.vals = append(vals, c.n.vals[at:]...)
		} else {
			item := str("x")
			if len(c.n.items) > 0 {
				item = c.n.items[0]
			}
			for i := 0; i < count; i++ {
				c.n.items = append(c.n.items, item.clone())
			}
		}
	},
	// Depth: a value wrapped in many arrays or objects.
	func(r *rand.Rand, root *node, t reflect.Type) {
		ls := collect(root, t, nil, 0, nil)
		if len(ls) < 2 {
			return
		}
		l := ls[1+r.Intn(len(ls)-1)]
		v := l.n
		for i := 3 + r.Intn(20); i > 0; i-- {
			if r.Intn(2) == 0 {
				v = &node{kind: 'a', items: []*node{v}}
			} else {
				v = &node{kind: 'o', keys: []string{pick(r, allKeys)}, vals: []*node{v}}
			}
		}
		replaceAt(l, v)
	},
	// Members in another order.
	func(r *rand.Rand, root *node, t reflect.Type) {
		objs := objects(collect(root, t, nil, 0, nil))
		o := objs[r.Intn(len(objs))].n
		r.Shuffle(len(o.keys), func(i, j int) {
			o.keys[i], o.keys[j] = o.keys[j], o.keys[i]
			o.vals[i], o.vals[j] = o.vals[j], o.vals[i]
		})
	},
	// Data the controller varies: a label or an environment entry more.
	func(r *rand.Rand, root *node, t reflect.Type) {
		for _, l := range shuffled(r, collect(root, t, nil, 0, nil)) {
			if l.parent == nil || l.parent.kind != 'o' {
				continue
			}
			switch l.parent.keys[l.index] {
			case "Labels", "Tmpfs", "DriverOpts":
				if l.n.kind == 'o' {
					insertMember(r, l.n, escape(pick(r, interesting)+fmt.Sprint(r.Intn(100))), str(pick(r, interesting)))
					return
				}
			case "Env", "Cmd":
				if l.n.kind == 'a' {
					l.n.items = append(l.n.items, str(pick(r, interesting)+"="+pick(r, interesting)))
					return
				}
			}
		}
	},
}

func shuffled(r *rand.Rand, ls []loc) []loc {
	r.Shuffle(len(ls), func(i, j int) { ls[i], ls[j] = ls[j], ls[i] })
	return ls
}

// rawMutation: bytes no tree can hold (control bytes, invalid UTF-8, a BOM, a second value).
func rawMutation(r *rand.Rand, body []byte) []byte {
	insert := func(b []byte) []byte {
		at := r.Intn(len(body) + 1)
		out := append([]byte{}, body[:at]...)
		out = append(out, b...)
		return append(out, body[at:]...)
	}
	switch r.Intn(7) {
	case 0:
		return insert([]byte{byte(r.Intn(32))})
	case 1:
		return insert([]byte{0x80 + byte(r.Intn(128))})
	case 2:
		return append([]byte("\xef\xbb\xbf"), body...)
	case 3:
		return append(append([]byte{}, body...), []byte(pick(r, []string{" {}", "x", "\x00", "\n", "]", ` {"Privileged":true}`}))...)
	case 4:
		return insert([]byte("\xc2\xa0"))
	case 5:
		if len(body) > 1 {
			return body[:r.Intn(len(body))]
		}
	}
	return insert([]byte(pick(r, []string{"\\", "\"", ",", ":", "/*x*/", "\\u0000"})))
}
