// body-fuzz throws generated request bodies at the socket proxy's body check (haproxy/*.lua, run
// by a standalone lua5.4 through test/haproxy/lua/check-bodies.lua) and, for every body it
// allows, reads the same bytes with dockerd's own decoders (Docker 20.10's API types, the
// engine's version): a finding is an allowed body Docker reads differently from the checker, one
// Docker cannot read at all, one whose reading breaks the proxy's policy (policy.go), or a
// checker that failed. Prints one JSON summary line; exit status 0 whatever it found (the test
// judges the summary).
//
// Usage:
//
//	body-fuzz -seeds seeds.json -count N -seed S -lua 'lua5.4 check-bodies.lua haproxy/' \
//	  -shared NAME -drivers a,b -images x,y
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"

	"strconv"
	"strings"
	"time"
)

type seed struct {
	Route string `json:"route"`
	Body  string `json:"body"`
}

type finding struct {
	Kind   string      `json:"kind"`
	Route  string      `json:"route"`
	Body   string      `json:"body"`
	Detail string      `json:"detail"`
	Lua    interface{} `json:"lua,omitempty"`
	Docker interface{} `json:"docker,omitempty"`
}

type summary struct {
	Bodies        int            `json:"bodies"`
	Allowed       int            `json:"allowed"`
	AllowedRoutes map[string]int `json:"allowedByRoute"`
	Reasons       map[string]int `json:"reasons"`
	Findings      int            `json:"findings"`
	FindingKinds  map[string]int `json:"findingKinds"`
	Examples      []finding      `json:"examples"`
	Millis        int64          `json:"millis"`
	Bytes         int64          `json:"bytes"`
	MaxBody       int            `json:"maxBody"`
}

type job struct {
	route string
	body  []byte
}

const maxBody = 32 * 1024

func main() {
	seedsFile := flag.String("seeds", "", "JSON list of {route, body}")
	count := flag.Int("count", 100000, "bodies to generate")
	seedValue := flag.Int64("seed", 1, "PRNG seed")
	luaCmd := flag.String("lua", "", "command line of the checker harness")
	shared := flag.String("shared", "capybara-sandbox", "SOCKET_PROXY_SHARED_NETWORK")
	drivers := flag.String("drivers", "", "SOCKET_PROXY_VOLUME_DRIVERS")
	images := flag.String("images", "", "SOCKET_PROXY_IMAGES")
	flag.Parse()

	var seeds []seed
	data, err := os.ReadFile(*seedsFile)
	must(err)
	must(json.Unmarshal(data, &seeds))
	trees := make([]*node, len(seeds))
	for i, s := range seeds {
		trees[i], err = parseSeed(s.Body)
		if err != nil {
			fail("seed %d (%s): %v", i, s.Route, err)
		}
	}
	set := newSettings(*shared, *drivers, *images)

	args := strings.Fields(*luaCmd)
	cmd := exec.Command(args[0], args[1:]...)
	// DOCKER_SOCKET: where the proxy proves network ids; the check itself never dials it.
	// The ceilings are left to their defaults, which policy.go restates.
	cmd.Env = append(os.Environ(), "SOCKET_PROXY_SHARED_NETWORK="+*shared, "SOCKET_PROXY_VOLUME_DRIVERS="+*drivers,
		"SOCKET_PROXY_IMAGES="+*images, "SOCKET_PROXY_REGISTRIES=", "SOCKET_PROXY_MAX_PIDS=", "SOCKET_PROXY_MAX_MEMORY=",
		"SOCKET_PROXY_MAX_CPUS=", "DOCKER_SOCKET=/var/run/docker.sock")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	must(err)
	stdout, err := cmd.StdoutPipe()
	must(err)
	must(cmd.Start())

	started := time.Now()
	sum := summary{AllowedRoutes: map[string]int{}, Reasons: map[string]int{}, FindingKinds: map[string]int{}}
	inFlight := make(chan job, 512)
	go func() {
		r := rand.New(rand.NewSource(*seedValue))
		w := bufio.NewWriterSize(stdin, 1<<16)
		for i := 0; i < *count; i++ {
			k := r.Intn(len(seeds))
			body := generate(r, seeds[k].Route, trees[k])
			inFlight <- job{seeds[k].Route, body}
			fmt.Fprintf(w, "%s %d\n", seeds[k].Route, len(body))
			w.Write(body)
		}
		must(w.Flush())
		stdin.Close()
		close(inFlight)
	}()

	lines := bufio.NewReaderSize(stdout, 1<<20)
	for j := range inFlight {
		line, err := lines.ReadString('\n')
		if err != nil {
			fail("checker stopped: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		sum.Bodies++
		sum.Bytes += int64(len(j.body))
		if len(j.body) > sum.MaxBody {
			sum.MaxBody = len(j.body)
		}
		if strings.HasPrefix(line, "deny ") {
			reason := line[5:]
			if reason == "body_check_failed" {
				record(&sum, finding{Kind: "checker_failed", Route: j.route, Body: string(j.body)})
			}
			code := strings.SplitN(reason, ":", 2)[0]
			sum.Reasons[code]++
			continue
		}
		if !strings.HasPrefix(line, "ok ") {
			fail("unexpected checker line %q", line)
		}
		sum.Allowed++
		sum.AllowedRoutes[j.route]++
		if len(j.body) > maxBody {
			record(&sum, finding{Kind: "over_size", Route: j.route, Body: string(j.body), Detail: strconv.Itoa(len(j.body))})
			continue
		}
		d, err := decode(j.route, j.body)
		if err != nil {
			record(&sum, finding{Kind: "docker_refused", Route: j.route, Body: string(j.body), Detail: err.Error()})
			continue
		}
		// After a tab: the network ids the proxy proves before forwarding (not part of the reading).
		reading := strings.SplitN(line[3:], "\t", 2)[0]
		if same, lv, dv := sameReading([]byte(reading), d); !same {
			record(&sum, finding{Kind: "read_differently", Route: j.route, Body: string(j.body), Lua: lv, Docker: dv})
			continue
		}
		if err := policy(j.route, d, set); err != nil {
			record(&sum, finding{Kind: "policy", Route: j.route, Body: string(j.body), Detail: err.Error()})
		}
	}
	if _, err := io.Copy(io.Discard, lines); err != nil {
		fail("%v", err)
	}
	must(cmd.Wait())
	sum.Millis = time.Since(started).Milliseconds()
	out, _ := json.Marshal(sum)
	fmt.Println(string(out))
}

// generate: a seed with 0-3 tree mutations, serialised (sometimes with blanks), and now and then
// a raw byte-level change on top.
func generate(r *rand.Rand, route string, seedTree *node) []byte {
	root := seedTree.clone()
	t := routeTypes[route]
	for i := r.Intn(4); i > 0; i-- {
		mutations[r.Intn(len(mutations))](r, root, t)
	}
	w := &writer{r: r, blanks: r.Intn(4) == 0}
	w.write(root)
	body := w.buf.Bytes()
	if r.Intn(12) == 0 {
		body = rawMutation(r, body)
	}
	if len(body) > maxBody {
		body = body[:maxBody]
	}
	return body
}

func record(s *summary, f finding) {
	s.Findings++
	s.FindingKinds[f.Kind]++
	if len(s.Examples) < 10 {
		if len(f.Body) > 2000 {
			f.Body = f.Body[:2000] + "..."
		}
		s.Examples = append(s.Examples, f)
	}
}

func must(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "body-fuzz: "+format+"\n", args...)
	os.Exit(2)
}
