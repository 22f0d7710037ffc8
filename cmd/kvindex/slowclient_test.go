package main

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowClient opens a connection to addr, sends the headers of a 100 KB POST and then trickles
// its body one byte per 50 ms until the server answers or closes. It returns when the server
// did, with the status line it answered ("" for a close without one).
func slowClient(t *testing.T, addr string, out chan<- string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Errorf("dial: %v", err)
		out <- "dial error"
		return
	}
	defer c.Close()
	if _, err := c.Write([]byte("POST /v1/events HTTP/1.1\r\nHost: kvindex\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n[")); err != nil {
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
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	close(stop)
	out <- strings.TrimSpace(line)
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
	p := start(t, t.TempDir(), "--body-timeout", "1s", "--max-conns", "64")
	p.waitReady()
	addr := strings.TrimPrefix(p.base, "http://")
	const slow = 40
	out := make(chan string, slow)
	begin := time.Now()
	var wg sync.WaitGroup
	for range slow {
		wg.Add(1)
		go func() { defer wg.Done(); slowClient(t, addr, out) }()
	}
	// Ordinary requests while they trickle: answered at once.
	time.Sleep(200 * time.Millisecond)
	for i := range 20 {
		t0 := time.Now()
		if code, body := p.post("/v1/find_matches", `{"block_hashes":[1,2,3]}`); code != 200 {
			t.Fatalf("find_matches %d beside slow clients: %d %s", i, code, body)
		}
		if d := time.Since(t0); d > 500*time.Millisecond {
			t.Errorf("find_matches %d beside %d slow clients took %v", i, slow, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	close(out)
	if d := time.Since(begin); d > 8*time.Second {
		t.Errorf("slow clients held their connections for %v with --body-timeout 1s", d)
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
	for range 4 {
		go slowClient(t, qaddr, out)
	}
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	if code, body := q.post("/v1/find_matches", `{"block_hashes":[1]}`); code != 200 {
		t.Fatalf("find_matches at the cap: %d %s", code, body)
	}
	if d := time.Since(t0); d > 6*time.Second {
		t.Errorf("a request at the cap waited %v, want about --body-timeout", d)
	}
	for range 4 {
		<-out
	}
	if v := q.metricValue("kvindex_http_conn_cap_waits_total"); v == "" || v == "0" {
		t.Errorf("kvindex_http_conn_cap_waits_total %q, want ≥ 1", v)
	}
	if !strings.Contains(q.logs(), "connection cap reached") {
		t.Errorf("no log line at the cap:\n%s", q.logs())
	}
}
