package server

import (
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvindex/kvindex/internal/retry"
	"github.com/prometheus/client_golang/prometheus"
)

// ConnOptions bound what one HTTP client can hold: a client that sends its headers and then
// trickles its body one byte at a time would otherwise keep its connection, goroutine and file
// descriptor for as long as it trickles.
type ConnOptions struct {
	// BodyTimeout: a request body must arrive at BodyChunk bytes per BodyTimeout at least (the
	// whole body when smaller), else the read fails, the request is answered 408 and the
	// connection closed. Default 10 s.
	BodyTimeout time.Duration
	// MaxConns caps the open connections; at the cap new ones wait in the listen backlog until
	// one closes (logged, kvindex_http_conn_cap_waits_total). Default 4096; negative is no cap.
	MaxConns int
	// IdleTimeout closes a keep-alive connection idle this long. Default 2 min.
	IdleTimeout time.Duration
}

// BodyChunk is the bytes a body must deliver per ConnOptions.BodyTimeout.
const BodyChunk = 64 << 10

func (o *ConnOptions) defaults() {
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 10 * time.Second
	}
	if o.MaxConns == 0 {
		o.MaxConns = 4096
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 2 * time.Minute
	}
}

// connStats counts connections for /metrics.
type connStats struct {
	open     atomic.Int64
	capWaits atomic.Uint64 // accepts that waited for a free slot
	slow     atomic.Uint64 // bodies cut off for arriving too slowly
}

var (
	descConnsOpen = prometheus.NewDesc("kvindex_http_connections", "Open HTTP connections (counted against --max-conns).", nil, nil)
	descCapWaits  = prometheus.NewDesc("kvindex_http_conn_cap_waits_total", "Connections that waited in the listen backlog because --max-conns were open.", nil, nil)
	descSlowBody  = prometheus.NewDesc("kvindex_http_slow_bodies_total", "Requests cut off because their body arrived slower than 64 KiB per --body-timeout (answered 408).", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *connStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConnsOpen
	ch <- descCapWaits
	ch <- descSlowBody
}

// Collect implements prometheus.Collector.
func (c *connStats) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descConnsOpen, prometheus.GaugeValue, float64(c.open.Load()))
	ch <- prometheus.MustNewConstMetric(descCapWaits, prometheus.CounterValue, float64(c.capWaits.Load()))
	ch <- prometheus.MustNewConstMetric(descSlowBody, prometheus.CounterValue, float64(c.slow.Load()))
}

// httpServer is Run's http.Server: header, body (readBody) and idle bounds.
func (s *Server) httpServer() *http.Server {
	return &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: s.cfg.Conns.IdleTimeout,
		ErrorLog: log.New(&httpErrorLog{s: s}, "", 0)}
}

// plainHTTPOnTLS is how net/http's ErrorLog line ends when a client sent plain HTTP to the
// HTTPS port (it answered 400 "Client sent an HTTP request to an HTTPS server.").
const plainHTTPOnTLS = "client sent an HTTP request to an HTTPS server"

// httpErrorLog is the http.Server's ErrorLog: its own complaints (failed TLS handshakes, broken
// clients) are debug lines, except a plain-HTTP request to the HTTPS port, a client set up with
// http:// instead of https://, which is a warning naming the fix (at most one a minute, saying
// how many were not logged).
type httpErrorLog struct {
	s      *Server
	mu     sync.Mutex // guards report
	report retry.Reporter
}

func (l *httpErrorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if !strings.HasSuffix(msg, plainHTTPOnTLS) {
		l.s.lg.Debug(msg)
		return len(p), nil
	}
	// "http: TLS handshake error from 127.0.0.1:51234: client sent …"
	remote, _, _ := strings.Cut(strings.TrimPrefix(msg, "http: TLS handshake error from "), ": ")
	l.mu.Lock()
	ok, notLogged := l.report.Report(time.Now(), errPlainHTTP)
	l.mu.Unlock()
	if ok {
		l.s.lg.Warn("a client sent plain HTTP to this HTTPS port (--tls-cert): answered 400; the client must use https:// URLs",
			"remote_addr", remote, "requests_not_logged", notLogged)
	}
	return len(p), nil
}

var errPlainHTTP = errors.New(plainHTTPOnTLS)

// limitConns caps the connections ln hands out at Conns.MaxConns.
func (s *Server) limitConns(ln net.Listener) net.Listener {
	if s.cfg.Conns.MaxConns < 0 {
		return &countedListener{Listener: ln, s: s}
	}
	return &countedListener{Listener: ln, s: s, slots: make(chan struct{}, s.cfg.Conns.MaxConns)}
}

// countedListener counts its connections and, with slots, takes one per connection before
// accepting it (so at the cap the kernel's backlog holds new clients, as netutil.LimitListener).
type countedListener struct {
	net.Listener
	s      *Server
	slots  chan struct{} // nil: no cap
	report retry.Reporter
	mu     sync.Mutex // guards report
}

func (l *countedListener) Accept() (net.Conn, error) {
	if l.slots != nil {
		select {
		case l.slots <- struct{}{}:
		default:
			l.s.conns.capWaits.Add(1)
			l.mu.Lock()
			if ok, notLogged := l.report.Report(time.Now(), errConnCap); ok {
				l.s.lg.Warn("connection cap reached: new connections wait in the listen backlog until one closes (--max-conns)",
					"max_conns", cap(l.slots), "waits_not_logged", notLogged)
			}
			l.mu.Unlock()
			l.slots <- struct{}{}
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		if l.slots != nil {
			<-l.slots
		}
		return nil, err
	}
	l.s.conns.open.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

var errConnCap = errors.New("connection cap reached")

type countedConn struct {
	net.Conn
	l    *countedListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.s.conns.open.Add(-1)
		if c.l.slots != nil {
			<-c.l.slots
		}
	})
	return err
}

// paceBody returns body read under a deadline that moves BodyTimeout ahead each time another
// BodyChunk bytes arrived; a body slower than that fails with os.ErrDeadlineExceeded.
func (s *Server) paceBody(w http.ResponseWriter, body io.Reader) io.Reader {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.cfg.Conns.BodyTimeout)) != nil {
		return body // not a net/http connection (an in-process test's recorder)
	}
	return &pacedBody{r: body, rc: rc, timeout: s.cfg.Conns.BodyTimeout}
}

type pacedBody struct {
	r       io.Reader
	rc      *http.ResponseController
	timeout time.Duration
	since   int // bytes since the deadline last moved
}

func (p *pacedBody) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.since += n
	if err == io.EOF {
		// The body is in: no deadline for net/http's read that watches for the client going
		// away while the handler works (a timeout there would cancel the request's context).
		_ = p.rc.SetReadDeadline(time.Time{})
		return n, err
	}
	if p.since >= BodyChunk {
		p.since = 0
		_ = p.rc.SetReadDeadline(time.Now().Add(p.timeout))
	}
	return n, err
}

// slowBody reports whether err is a paced body's deadline.
func slowBody(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// Unwrap lets http.ResponseController reach the connection under the route wrapper (paceBody's
// read deadline).
func (sw *statusWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }
