package main

// An ordered JSON tree that keeps what encoding/json would throw away: member order, duplicate
// members, and the exact spelling of keys and strings (escapes, case, non-ASCII), so that a
// mutation can produce any body a client could send, valid or not.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"strings"
)

type node struct {
	kind  byte     // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	keys  []string // object: raw key text between the quotes (already escaped)
	vals  []*node
	items []*node
	raw   string // string: raw text between the quotes; number: the lexeme
	b     bool
}

func str(s string) *node   { return &node{kind: 's', raw: escape(s)} }
func num(s string) *node   { return &node{kind: 'n', raw: s} }
func boolean(b bool) *node { return &node{kind: 'b', b: b} }
func null() *node          { return &node{kind: 'z'} }

// escape writes s as JSON string content: quotes, backslashes and control bytes escaped, every
// other byte as it is (UTF-8 stays raw).
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, "\\u%04x", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func (n *node) clone() *node {
	c := *n
	c.keys = append([]string(nil), n.keys...)
	c.vals = make([]*node, len(n.vals))
	for i, v := range n.vals {
		c.vals[i] = v.clone()
	}
	c.items = make([]*node, len(n.items))
	for i, v := range n.items {
		c.items[i] = v.clone()
	}
	return &c
}

// parseSeed reads a well-formed JSON body (the seeds are the controller's and the corpus's).
func parseSeed(body string) (*node, error) {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	n, err := readNode(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data in seed")
	}
	return n, nil
}

func readNode(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	return fromToken(dec, tok)
}

func fromToken(dec *json.Decoder, tok json.Token) (*node, error) {
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			n := &node{kind: 'o'}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := readNode(dec)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, escape(kt.(string)))
				n.vals = append(n.vals, v)
			}
			_, err := dec.Token()
			return n, err
		}
		n := &node{kind: 'a'}
		for dec.More() {
			v, err := readNode(dec)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
		_, err := dec.Token()
		return n, err
	case string:
		return str(t), nil
	case json.Number:
		return num(string(t)), nil
	case bool:
		return boolean(t), nil
	case nil:
		return null(), nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// writer serialises a tree, now and then with blanks between tokens.
type writer struct {
	r      *rand.Rand
	blanks bool
	buf    bytes.Buffer
}

var blankSets = []string{" ", "\n", "\t", "\r\n", "  "}

func (w *writer) gap() {
	if w.blanks && w.r.Intn(3) == 0 {
		w.buf.WriteString(blankSets[w.r.Intn(len(blankSets))])
	}
}

func (w *writer) write(n *node) {
	switch n.kind {
	case 'o':
		w.buf.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				w.buf.WriteByte(',')
			}
			w.gap()
			w.buf.WriteByte('"')
			w.buf.WriteString(k)
			w.buf.WriteByte('"')
			w.gap()
			w.buf.WriteByte(':')
			w.gap()
			w.write(n.vals[i])
			w.gap()
		}
		w.buf.WriteByte('}')
	case 'a':
		w.buf.WriteByte('[')
		for i, v := range n.items {
			if i > 0 {
				w.buf.WriteByte(',')
			}
			w.gap()
			w.write(v)
			w.gap()
		}
		w.buf.WriteByte(']')
	case 's':
		w.buf.WriteByte('"')
		w.buf.WriteString(n.raw)
		w.buf.WriteByte('"')
	case 'n':
		w.buf.WriteString(n.raw)
	case 'b':
		if n.b {
			w.buf.WriteString("true")
		} else {
			w.buf.WriteString("false")
		}
	case 'z':
		w.buf.WriteString("null")
	}
}
