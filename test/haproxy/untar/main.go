// untar extracts archives as dockerd extracts one put into a container (PUT
// /containers/<name>/archive: github.com/docker/docker/pkg/archive, Docker 20.10's, with the options
// dockerd passes when the request names neither noOverwriteDirNonDir nor copyUIDGID), each into a
// fresh directory, and prints what it made there: one JSON line per archive. The registration fuzz
// (test/haproxy/body-fuzz-registration.test.ts) reads every archive the socket proxy's check
// allowed through it.
//
// Usage: untar < frames, each "<byte count>\n<archive bytes>".
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/docker/docker/pkg/archive"
)

type file struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"`
	Mode    string `json:"mode"`
	UID     uint32 `json:"uid"`
	GID     uint32 `json:"gid"`
	Content string `json:"content,omitempty"`
}

type result struct {
	Error string `json:"error,omitempty"`
	Files []file `json:"files"`
}

func extract(data []byte) result {
	dir, err := os.MkdirTemp("", "capybara-untar-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	out := result{Files: []file{}}
	if err := archive.Untar(strings.NewReader(string(data)), dir, &archive.TarOptions{}); err != nil {
		out.Error = err.Error()
	}
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || path == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		f := file{Path: rel, Mode: strconv.FormatUint(uint64(info.Mode().Perm()|info.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)), 8)}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			f.UID, f.GID = st.Uid, st.Gid
		}
		switch {
		case info.Mode().IsRegular():
			f.Kind = "file"
			b, _ := os.ReadFile(path)
			f.Content = string(b)
		case info.IsDir():
			f.Kind = "dir"
		case info.Mode()&os.ModeSymlink != 0:
			f.Kind = "symlink"
		default:
			f.Kind = "other"
		}
		out.Files = append(out.Files, f)
		return nil
	})
	return out
}

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	enc := json.NewEncoder(os.Stdout)
	for {
		head, err := in.ReadString('\n')
		if err == io.EOF {
			return
		}
		n, err := strconv.Atoi(strings.TrimSpace(head))
		if err != nil {
			panic(fmt.Sprintf("bad frame head %q", head))
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(in, data); err != nil {
			panic(err)
		}
		if err := enc.Encode(extract(data)); err != nil {
			panic(err)
		}
	}
}
