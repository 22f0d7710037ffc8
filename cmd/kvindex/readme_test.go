package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// readmeSection returns the text of README.md's section whose heading line starts with heading
// ("## Five-minute tour"), up to the next heading of the same or a higher level.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	level := heading[:strings.IndexByte(heading, ' ')+1] // "## "
	var out []string
	in, fenced := false, false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") && strings.Contains(line, "# ") {
			h := line[:strings.IndexByte(line, ' ')+1]
			if in && len(h) <= len(level) && strings.Trim(h, "# ") == "" {
				break
			}
			if strings.HasPrefix(line, heading) {
				in = true
				continue
			}
		}
		if in {
			out = append(out, line)
		}
	}
	if !in {
		t.Fatalf("README.md has no section %q", heading)
	}
	return strings.Join(out, "\n")
}

// codeBlocks returns the fenced blocks of a README section whose info string is lang ("" for a
// bare ```).
func codeBlocks(section, lang string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case !in && line == "```"+lang:
			in, cur = true, nil
		case in && line == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

// TestReadmeListsEveryFlag checks the rule "the README's CLI synopses name every flag of serve
// (and the global flags), bench and loadgen": a flag added to the CLI without a line in the
// README fails here.
func TestReadmeListsEveryFlag(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	synopsis := map[string]string{
		"serve":   codeBlocks(readmeSection(t, "## CLI"), "")[0],
		"bench":   codeBlocks(readmeSection(t, "### Benchmark and load"), "")[0],
		"loadgen": codeBlocks(readmeSection(t, "### Benchmark and load"), "")[0],
	}
	check := func(cmd, text string, flags []cli.Flag) {
		for _, f := range flags {
			name := f.Names()[0]
			if name == "help" {
				continue
			}
			if !regexp.MustCompile(`--` + regexp.QuoteMeta(name) + `\b`).MatchString(text) {
				t.Errorf("README.md: the %s synopsis does not name --%s", cmd, name)
			}
		}
	}
	check("serve", synopsis["serve"], app.Flags) // the global flags are listed with serve's
	for _, c := range app.Commands {
		if text, ok := synopsis[c.Name]; ok {
			check(c.Name, text, c.Flags)
		}
	}
}

// The README's shell examples are run by TestReadmeExamples, in these sections, in this order,
// against the binary. A block may hold, one per line (a command may span lines inside quotes):
//
//	NAME=$(mktemp -d)          a fresh temp dir, for "$NAME/..." below
//	bin/kvindex serve ARGS     started on a free port and a temp data dir when --data-dir is
//	                           not given; its README address (--listen) is mapped to the real one
//	                           (a trailing "2>FILE" and "&" are dropped: the test keeps the log)
//	kill %N ...                nothing: the test stops its servers when it ends
//	sleep N                    waits N seconds (a lease lapsing)
//	curl [-s] [-X M] [-d DATA | --data-binary DATA] [-H H] URL [| grep RE]
//	until curl -sf URL; do sleep N; done    the GET, retried until it answers 200
//	# ...                      a comment; after a command, a comment line that starts with "{",
//	                           "[" or "kvindex_" (or continues one with "#  ") is its expected
//	                           answer: exact, but "..." matches anything and a timestamp any
//	                           timestamp; a GET is retried for a while until it matches
//
// A comment with "start it again" restarts the first server with kill -9 on the same data dir.
var readmeExampleSections = []string{
	"## Five-minute tour",
	"## Workers without KV events: approximate mode",
	"## Several models: partitions",
	"## Use it as Dynamo's standalone indexer",
	"## Is the index right?",
}

type readmeRun struct {
	t       *testing.T
	vars    map[string]string
	servers map[string]readmeServer // by README port
}

type readmeServer struct {
	p   *proc
	dir string
}

// TestReadmeExamples runs the README's examples (readmeExampleSections) and compares each
// answer with the one the README shows.
func TestReadmeExamples(t *testing.T) {
	r := &readmeRun{t: t, vars: map[string]string{}, servers: map[string]readmeServer{}}
	r.serve("127.0.0.1:7070", t.TempDir(), nil) // "Start the service", before the tour
	for _, sec := range readmeExampleSections {
		for _, block := range codeBlocks(readmeSection(t, sec), "sh") {
			r.runBlock(block)
		}
	}
}

// serve starts bin/kvindex serve for the README address listen (its port stands for the server).
func (r *readmeRun) serve(listen, dir string, args []string) {
	_, port, _ := strings.Cut(listen, ":")
	p := start(r.t, dir, args...)
	p.waitReady() // as a reader who waits for the "ready" line before the next command
	r.servers[port] = readmeServer{p: p, dir: dir}
}

var readmeAddrRe = regexp.MustCompile(`\b(127\.0\.0\.1|localhost):(\d+)\b`)

// mapAddrs rewrites README addresses (localhost:7070) into the servers' real ones.
func (r *readmeRun) mapAddrs(s string) string {
	return readmeAddrRe.ReplaceAllStringFunc(s, func(a string) string {
		_, port, _ := strings.Cut(a, ":")
		if srv, ok := r.servers[port]; ok {
			return strings.TrimPrefix(srv.p.base, "http://")
		}
		return a
	})
}

func (r *readmeRun) runBlock(block string) {
	lines := strings.Split(block, "\n")
	var last *readmeCmd
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trim := strings.TrimSpace(line)
		switch {
		case trim == "":
			if last != nil {
				last.run()
				last = nil
			}
		case strings.HasPrefix(trim, "#"):
			c := strings.TrimPrefix(trim, "#")
			if last != nil && (strings.HasPrefix(c, " {") || strings.HasPrefix(c, " [") || strings.HasPrefix(c, " kvindex_") ||
				(len(last.want) > 0 && strings.HasPrefix(c, "  "))) {
				last.want = append(last.want, strings.TrimSpace(c))
				continue
			}
			if last != nil {
				last.run()
				last = nil
			}
			if strings.Contains(c, "start it again") {
				srv := r.servers["7070"]
				srv.p.kill()
				r.serve("127.0.0.1:7070", srv.dir, nil)
			}
		default:
			if last != nil {
				last.run()
				last = nil
			}
			cmd := line
			for !quotesBalanced(cmd) && i+1 < len(lines) {
				i++
				cmd += "\n" + lines[i]
			}
			last = r.command(cmd)
		}
	}
	if last != nil {
		last.run()
	}
}

// stripComment cuts a trailing "# comment" outside quotes.
func stripComment(s string) string {
	var q rune
	for i, c := range s {
		switch {
		case q == 0 && c == '#' && (i == 0 || s[i-1] == ' '):
			return s[:i]
		case q == 0 && (c == '\'' || c == '"'):
			q = c
		case c == q:
			q = 0
		}
	}
	return s
}

// quotesBalanced reports whether s closes every quote it opens (before a "# comment").
func quotesBalanced(s string) bool {
	var q rune
	for i, c := range s {
		switch {
		case q == 0 && c == '#' && (i == 0 || s[i-1] == ' '):
			return true
		case q == 0 && (c == '\'' || c == '"'):
			q = c
		case c == q:
			q = 0
		}
	}
	return q == 0
}

// words splits a shell command line: quotes, "$VAR", a trailing "# comment" and "|".
func (r *readmeRun) words(s string) []string {
	var out []string
	var cur strings.Builder
	have := false
	var q rune
	expand := func(rest string) (string, int) { // after '$'
		n := 0
		for n < len(rest) && (rest[n] == '_' || rest[n] >= 'A' && rest[n] <= 'Z' || rest[n] >= 'a' && rest[n] <= 'z' || rest[n] >= '0' && rest[n] <= '9') {
			n++
		}
		v, ok := r.vars[rest[:n]]
		if !ok {
			r.t.Fatalf("README: %q uses $%s, which no line above sets", s, rest[:n])
		}
		return v, n
	}
	for i := 0; i < len(s); i++ {
		c := rune(s[i])
		switch {
		case q == '\'':
			if c == q {
				q = 0
			} else {
				cur.WriteRune(c)
			}
		case c == '$' && q != '\'':
			v, n := expand(s[i+1:])
			cur.WriteString(v)
			i += n
			have = true
		case q == '"':
			if c == q {
				q = 0
			} else {
				cur.WriteRune(c)
			}
		case c == '\'' || c == '"':
			q, have = c, true
		case c == '#' && !have:
			return out
		case c == ' ' || c == '\t' || c == '\n' || c == '\\':
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(c)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

type readmeCmd struct {
	r    *readmeRun
	line string
	do   func() (answer string, retry bool)
	code int // a curl's last status
	want []string
}

func (c *readmeCmd) run() {
	t := c.r.t
	t.Helper()
	got, retry := c.do()
	if len(c.want) == 0 {
		return
	}
	want := strings.Join(c.want, "")
	if cut, _, ok := strings.Cut(want, "<-"); ok {
		want = strings.TrimSpace(cut)
	}
	for deadline := time.Now().Add(10 * time.Second); retry && !answerMatches(want, got) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		got, _ = c.do()
	}
	if !answerMatches(want, got) {
		t.Errorf("README: %s\nanswered %s\nREADME shows %s", c.line, got, want)
		return
	}
	t.Logf("README: %s: answered as shown", c.line)
}

var timestampRe = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

// answerMatches reports whether got is the answer want shows: equal, with "..." matching any
// text and a timestamp any timestamp.
func answerMatches(want, got string) bool {
	want = timestampRe.ReplaceAllString(want, "T")
	got = timestampRe.ReplaceAllString(strings.TrimSpace(got), "T")
	parts := strings.Split(want, "...")
	if len(parts) == 1 {
		return got == want
	}
	if !strings.HasPrefix(got, parts[0]) {
		return false
	}
	got = got[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(got, p)
		if i < 0 {
			return false
		}
		got = got[i+len(p):]
	}
	return strings.HasSuffix(got, parts[len(parts)-1])
}

var untilRe = regexp.MustCompile(`^until (curl -sf [^;]+); do sleep [0-9.]+; done$`)

var assignTempRe = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=\$\(mktemp -d\)$`)

// command parses one README command line into something to run.
func (r *readmeRun) command(line string) *readmeCmd {
	t := r.t
	t.Helper()
	c := &readmeCmd{r: r, line: strings.TrimSpace(line)}
	if m := assignTempRe.FindStringSubmatch(strings.TrimSpace(stripComment(line))); m != nil {
		r.vars[m[1]] = t.TempDir()
		c.do = func() (string, bool) { return "", false }
		return c
	}
	if m := untilRe.FindStringSubmatch(strings.TrimSpace(stripComment(line))); m != nil {
		get := r.command(m[1])
		c.do = func() (string, bool) {
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if out, _ := get.do(); get.code == http.StatusOK {
					return out, false
				}
				if time.Now().After(deadline) {
					t.Fatalf("README: %q: no 200 in 30 s", line)
				}
			}
		}
		return c
	}
	w := r.words(line)
	var grep *regexp.Regexp
	for i, x := range w {
		if x == "|" {
			if len(w) != i+3 || w[i+1] != "grep" {
				t.Fatalf("README: %q: only `| grep RE` is understood after a command", line)
			}
			grep = regexp.MustCompile(w[i+2])
			w = w[:i]
			break
		}
	}
	if n := len(w); n > 0 && w[n-1] == "&" { // in the background: the test's servers are
		w = w[:n-1]
	}
	if n := len(w); n > 0 && strings.HasPrefix(w[n-1], "2>") { // the test keeps the log itself
		w = w[:n-1]
	}
	switch {
	case len(w) == 2 && w[0] == "sleep":
		d, err := strconv.ParseFloat(w[1], 64)
		if err != nil || d < 0 || d > 10 {
			t.Fatalf("README: %q: sleep takes 0 to 10 seconds", line)
		}
		c.do = func() (string, bool) {
			time.Sleep(time.Duration(d * float64(time.Second)))
			return "", false
		}
	case len(w) >= 2 && w[0] == "kill" && strings.HasPrefix(w[1], "%"):
		c.do = func() (string, bool) { return "", false } // the test's cleanup stops them
	case len(w) >= 2 && w[0] == "bin/kvindex" && w[1] == "serve":
		var args []string
		listen, dir := "", ""
		for i := 2; i < len(w); i++ {
			switch w[i] {
			case "--listen":
				i++
				listen = w[i]
			case "--data-dir":
				i++
				dir = w[i]
			default:
				args = append(args, r.mapAddrs(w[i]))
			}
		}
		if listen == "" {
			listen = "127.0.0.1:7070"
		}
		if dir == "" {
			dir = t.TempDir()
		}
		c.do = func() (string, bool) {
			r.serve(listen, dir, args)
			return "", false
		}
	case len(w) >= 1 && w[0] == "curl":
		method, url, body, ctype := "", "", "", ""
		for i := 1; i < len(w); i++ {
			switch w[i] {
			case "-s", "-sf", "-f":
			case "-X":
				i++
				method = w[i]
			case "-d", "--data-binary":
				i++
				body = w[i]
				if ctype == "" {
					ctype = "application/x-www-form-urlencoded" // what curl sends with -d
				}
			case "-H":
				i++
				k, v, _ := strings.Cut(w[i], ":")
				if !strings.EqualFold(k, "Content-Type") {
					t.Fatalf("README: %q: only a Content-Type header is understood", line)
				}
				ctype = strings.TrimSpace(v)
			default:
				if strings.HasPrefix(w[i], "-") || url != "" {
					t.Fatalf("README: %q: curl argument %q is not understood", line, w[i])
				}
				url = w[i]
			}
		}
		if method == "" {
			method = "GET"
			if body != "" {
				method = "POST"
			}
		}
		if !strings.Contains(url, "://") {
			url = "http://" + url
		}
		url = r.mapAddrs(url)
		c.do = func() (string, bool) {
			req, err := http.NewRequest(method, url, strings.NewReader(body))
			if err != nil {
				t.Fatalf("README: %q: %v", line, err)
			}
			if ctype != "" {
				req.Header.Set("Content-Type", ctype)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("README: %q: %v", line, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			c.code = resp.StatusCode
			out := string(b)
			if grep != nil {
				var keep []string
				for _, l := range strings.Split(out, "\n") {
					if grep.MatchString(l) {
						keep = append(keep, l)
					}
				}
				out = strings.Join(keep, "\n")
			}
			return out, method == "GET"
		}
	default:
		t.Fatalf("README: %q: TestReadmeExamples does not know how to run this (see readmeExampleSections)", line)
	}
	return c
}
