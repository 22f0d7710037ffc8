package main

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowClient opens a connection to addr, sends the headers of a 100 KB POST asking to be told
// when to send the body (Expect: 100-continue), and once the server's handler reads it (its
// "100 Continue": the connection is accepted and the body is being read) reports on reading,
// then trickles the body one byte per 50 ms until the server answers or closes. It returns when
// the server did, with the final status line it answered ("" for a close without one).
func slowClient(t *testing.T, addr string, reading chan<- struct{}, out chan<- string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Errorf("dial: %v", err)
		out <- "dial error"
		return
	}
	defer c.Close()
	if _, err := c.Write([]byte("POST /v1/events HTTP/1.1\r\nHost: kvindex\r\nContent-Type: application/json\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")); err != nil {
		out <- "write error"
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	rd := bufio.NewReader(c)
	line, _ := rd.ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 100") {
		out <- "before the body: " + strings.TrimSpace(line)
		return
	}
	_, _ = rd.ReadString('\n') // the empty line ending the interim answer
	reading <- struct{}{}
	if _, err := c.Write([]byte("[")); err != nil {
		out <- "write error"
		return
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	line, _ = rd.ReadString('\n')
	close(stop)
	out <- strings.TrimSpace(line)
}

// waitReading waits until n slow clients report their body is being read (fails after 20 s).
func waitReading(t *testing.T, reading <-chan struct{}, n int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for i := range n {
		select {
		case <-reading:
		case <-deadline:
			t.Fatalf("%d of %d slow clients had their body read by the server within 20 s", i, n)
		}
	}
}

// metricValue reads one sample of the server's /metrics ("" when absent).
func (p *proc) metricValue(name string) string {
	_, body := p.do("GET", "/metrics", "", nil)
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestSlowClientsAreCutOff checks the rule "a client that trickles its body holds its
// connection for --body-timeout at most (answered 408, closed, counted), ordinary requests keep
// their latency meanwhile, and at --max-conns new connections wait (logged, counted) until the
// slow ones are cut".
func TestSlowClientsAreCutOff(t *testing.T) {
	p := start(t, t.TempDir(), "--body-timeout", "2s", "--max-conns", "64")
	p.waitReady()
	addr := strings.TrimPrefix(p.base, "http://")
	const slow = 40
	out := make(chan string, slow)
	reading := make(chan struct{}, slow)
	begin := time.Now()
	var wg sync.WaitGroup
	for range slow {
		wg.Add(1)
		go func() { defer wg.Done(); slowClient(t, addr, reading, out) }()
	}
	// Ordinary requests while they trickle (every slow client connected, its body being read):
	// answered at once.
	waitReading(t, reading, slow)
	if v, _ := strconv.Atoi(p.metricValue("kvindex_http_connections")); v < slow {
		t.Fatalf("kvindex_http_connections %d with %d slow clients reading their bodies", v, slow)
	}
	for i := range 20 {
		t0 := time.Now()
		if code, body := p.post("/v1/find_matches", `{"block_hashes":[1,2,3]}`); code != 200 {
			t.Fatalf("find_matches %d beside slow clients: %d %s", i, code, body)
		}
		if d := time.Since(t0); d > 500*time.Millisecond {
			t.Errorf("find_matches %d beside %d slow clients took %v", i, slow, d)
		}
	}
	if len(out) > 0 {
		t.Fatalf("%d slow clients were answered before the ordinary requests ended: they did not run beside them", len(out))
	}
	wg.Wait()
	close(out)
	if d := time.Since(begin); d > 8*time.Second {
		t.Errorf("slow clients held their connections for %v with --body-timeout 2s", d)
	}
	for line := range out {
		if !strings.HasPrefix(line, "HTTP/1.1 408") {
			t.Errorf("a slow client got %q, want 408", line)
		}
	}
	if v := p.metricValue("kvindex_http_slow_bodies_total"); v != "40" {
		t.Errorf("kvindex_http_slow_bodies_total %q, want 40", v)
	}

	// At the cap: with every slot held by a slow client, a new request waits for one to be cut.
	q := start(t, t.TempDir(), "--body-timeout", "1s", "--max-conns", "4")
	q.waitReady()
	// start's and waitReady's keep-alive connections hold slots too: drop them.
	http.DefaultClient.CloseIdleConnections()
	qaddr := strings.TrimPrefix(q.base, "http://")
	out = make(chan string, 4)
	reading = make(chan struct{}, 4)
	for range 4 {
		go slowClient(t, qaddr, reading, out)
	}
	waitReading(t, reading, 4) // every slot is held by a slow client
	t0 := time.Now()
	if code, body := q.post("/v1/find_matches", `{"block_hashes":[1]}`); code != 200 {
		t.Fatalf("find_matches at the cap: %d %s", code, body)
	}
	if d := time.Since(t0); d > 6*time.Second {
		t.Errorf("a request at the cap waited %v, want about --body-timeout", d)
	}
	for range 4 {
		if line := <-out; !strings.HasPrefix(line, "HTTP/1.1 408") {
			t.Errorf("a slow client at the cap got %q, want 408", line)
		}
	}
	if v := q.metricValue("kvindex_http_conn_cap_waits_total"); v == "" || v == "0" {
		t.Errorf("kvindex_http_conn_cap_waits_total %q, want ≥ 1", v)
	}
	if !strings.Contains(q.logs(), "connection cap reached") {
		t.Errorf("no log line at the cap:\n%s", q.logs())
	}
}
