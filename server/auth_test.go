package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"github.com/kvindex/kvindex/engine"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/wal"
)

const testToken = "tok-3f9a"

// sampleRequests holds a request for every route of the table: method, path and body. A route
// added to the table without a sample fails TestAuthMutatingRoutes, so it gets checked.
var sampleRequests = map[string][2]string{
	"POST /v1/events":                                {"/v1/events", "[]"},
	"POST /v1/find_matches":                          {"/v1/find_matches", `{"block_hashes":[1]}`},
	"POST /v1/find_matches_for_request":              {"/v1/find_matches_for_request", `{"tokens":[1]}`},
	"GET /v1/ranks":                                  {"/v1/ranks", ""},
	"GET /v1/ranks/{worker_id}/{dp_rank}/events":     {"/v1/ranks/9/0/events", ""},
	"DELETE /v1/workers/{worker_id}":                 {"/v1/workers/9", ""},
	"DELETE /v1/workers/{worker_id}/ranks/{dp_rank}": {"/v1/workers/9/ranks/0", ""},
	"PUT /v1/workers/{worker_id}/source":             {"/v1/workers/9/source", `{"url":"http://127.0.0.1:1"}`},
	"DELETE /v1/workers/{worker_id}/source":          {"/v1/workers/9/source", ""},
	"GET /v1/sources":                                {"/v1/sources", ""},
	"POST /v1/sources":                               {"/v1/sources", `{}`},
	"DELETE /v1/sources/{id}":                        {"/v1/sources/nope", ""},
	"GET /v1/dump":                                   {"/v1/dump", ""},
	"POST /v1/flush":                                 {"/v1/flush", ""},
	"POST /v1/routing_decisions":                     {"/v1/routing_decisions", `{"worker_id":1,"block_hashes":[1]}`},
	"PUT /v1/workers/{worker_id}/lease":              {"/v1/workers/1/lease", `{"ttl_ms":1000}`},
	"DELETE /v1/workers/{worker_id}/lease":           {"/v1/workers/1/lease", ""},
	"GET /v1/leases":                                 {"/v1/leases", ""},
	"POST /v1/outcomes":                              {"/v1/outcomes", `{"worker_id":1,"block_hashes":[1],"cached_tokens":0}`},
	"GET /v1/accuracy":                               {"/v1/accuracy", ""},
	"GET /healthz":                                   {"/healthz", ""},
	"GET /readyz":                                    {"/readyz", ""},
	"GET /metrics":                                   {"/metrics", ""},
	"GET /{$}":                                       {"/", ""},
	"GET /openapi.json":                              {"/openapi.json", ""},
	"POST /register":                                 {"/register", `{}`},
	"POST /unregister":                               {"/unregister", `{"instance_id":9,"model_name":"m"}`},
	"GET /workers":                                   {"/workers", ""},
	"POST /query":                                    {"/query", `{"token_ids":[1],"model_name":"default"}`},
	"POST /query_by_hash":                            {"/query_by_hash", `{"block_hashes":[-1],"model_name":"default"}`},
	"GET /dump":                                      {"/dump", ""},
	"POST /register_peer":                            {"/register_peer", `{"url":"http://127.0.0.1:1"}`},
	"POST /deregister_peer":                          {"/deregister_peer", `{"url":"http://127.0.0.1:1"}`},
	"GET /peers":                                     {"/peers", ""},
	"GET /health":                                    {"/health", ""},
	"POST /reopen_logs":                              {"/reopen_logs", ""},
}

// doReq sends one request with an optional Authorization header and returns status, headers and
// body.
func doReq(t *testing.T, c *http.Client, method, url, body, auth string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestAuthMutatingRoutes checks the rule "with an auth token, every mutating route of the table
// answers 401 with a JSON error and a WWW-Authenticate: Bearer challenge without the token or with
// a wrong one, and is served with the right one".
func TestAuthMutatingRoutes(t *testing.T) {
	s, url := rangeServer(t, Config{AuthToken: testToken}, engine.DumpCacheOptions{})
	want := []string{"POST /v1/events", "DELETE /v1/workers/{worker_id}", "DELETE /v1/workers/{worker_id}/ranks/{dp_rank}",
		"PUT /v1/workers/{worker_id}/source", "DELETE /v1/workers/{worker_id}/source", "POST /v1/sources",
		"DELETE /v1/sources/{id}", "POST /v1/flush", "POST /v1/routing_decisions",
		"PUT /v1/workers/{worker_id}/lease", "DELETE /v1/workers/{worker_id}/lease", "POST /v1/outcomes", "POST /register", "POST /unregister",
		"POST /register_peer", "POST /deregister_peer"}
	var got []string
	for _, rt := range s.routes() {
		if rt.mutating {
			got = append(got, rt.pattern)
		}
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("mutating routes %q, want %q", got, want)
	}
	for _, pattern := range got {
		sample, ok := sampleRequests[pattern]
		if !ok {
			t.Errorf("%s: no sample request in sampleRequests", pattern)
			continue
		}
		method, _, _ := strings.Cut(pattern, " ")
		for _, tc := range []struct {
			name, auth string
			want401    bool
		}{
			{"no token", "", true},
			{"wrong token", "Bearer tok-3f9b", true},
			{"other scheme", "Basic " + testToken, true},
			{"right token", "Bearer " + testToken, false},
			{"right token, lower-case scheme", "bearer " + testToken, false},
		} {
			t.Run(pattern+"/"+tc.name, func(t *testing.T) {
				code, hdr, body := doReq(t, http.DefaultClient, method, url+sample[0], sample[1], tc.auth)
				if !tc.want401 {
					if code == http.StatusUnauthorized || code >= 500 {
						t.Fatalf("%d %s, want it served (2xx/4xx, not 401)", code, body)
					}
					return
				}
				var e struct{ Error string }
				if code != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") ||
					json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
					t.Fatalf("%d %q %s, want 401 with a Bearer challenge and a JSON error", code, hdr.Get("WWW-Authenticate"), body)
				}
			})
		}
	}
}

// TestAuthReadsStayOpen checks the rule "with an auth token, routes that change nothing are served
// without it".
func TestAuthReadsStayOpen(t *testing.T) {
	s, url := rangeServer(t, Config{AuthToken: testToken}, engine.DumpCacheOptions{})
	for _, rt := range s.routes() {
		if rt.mutating {
			continue
		}
		sample, ok := sampleRequests[rt.pattern]
		if !ok {
			t.Errorf("%s: no sample request in sampleRequests", rt.pattern)
			continue
		}
		method, _, _ := strings.Cut(rt.pattern, " ")
		want := http.StatusOK
		if rt.pattern == "POST /query" || rt.pattern == "POST /query_by_hash" {
			want = http.StatusNotFound // answered: Dynamo's default partition does not pre-exist (docs/CONTRACT.md §9)
		}
		if code, _, body := doReq(t, http.DefaultClient, method, url+sample[0], sample[1], ""); code != want {
			t.Errorf("%s without a token: %d %s, want %d", rt.pattern, code, body, want)
		}
	}
}

// TestReadAuthToken checks the rule "the token is the file's content trimmed; a missing, empty or
// multi-word file is ErrAuthTokenFile".
func TestReadAuthToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if tok, err := ReadAuthToken(write("ok", "  "+testToken+"\n")); err != nil || tok != testToken {
		t.Fatalf("ReadAuthToken: %q, %v", tok, err)
	}
	for _, p := range []string{write("empty", " \n"), write("two", "a b\n"), filepath.Join(dir, "missing")} {
		if _, err := ReadAuthToken(p); !errors.Is(err, ErrAuthTokenFile) {
			t.Errorf("%s: %v, want ErrAuthTokenFile", filepath.Base(p), err)
		}
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key into dir and returns
// their paths and a pool trusting the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvindex test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// freeAddr returns a loopback address nothing listens on now (for a Run that fails before it
// listens; one that serves takes localListener's socket).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// localListener is a socket bound on a free loopback port, for Config.Listener: bound before
// Run starts, so nothing (another test's connection from an ephemeral port, a peer dialing it)
// takes the port between a pick and a listen.
func localListener(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, ln.Addr().String()
}

// runServer starts Run in the background and stops it (checking a clean stop) at cleanup.
func runServer(t *testing.T, cfg Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// TestTLSServe checks the rules "with a certificate and key, Run serves HTTPS (and nothing over
// plain HTTP), auth included" and "a plain-HTTP request to the HTTPS port is answered 400 as
// Go's own server answers it, and logged as a warning naming the fix (once a minute at most)".
func TestTLSServe(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	ln, addr := localListener(t)
	var logs syncBuf
	runServer(t, Config{DataDir: filepath.Join(dir, "data"), Listener: ln, TLSCertFile: certFile, TLSKeyFile: keyFile,
		AuthToken: testToken, Durability: wal.NoSync, Lanes: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, _ := doReqNoFatal(c, "GET", "https://"+addr+"/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("HTTPS /readyz never answered 200 (last %d)", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _, body := doReq(t, c, "POST", "https://"+addr+"/v1/flush", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("flush over HTTPS without a token: %d %s, want 401", code, body)
	}
	if code, _, body := doReq(t, c, "POST", "https://"+addr+"/v1/flush", "", "Bearer "+testToken); code != http.StatusOK {
		t.Fatalf("flush over HTTPS with the token: %d %s, want 200", code, body)
	}
	// Go's TLS layer answers this 400 below the API (text/plain, no Content-Type): a client of
	// its own, outside the OpenAPI-validating default transport.
	plain := &http.Client{Transport: &http.Transport{}}
	for i := 0; i < 3; i++ {
		code, body, err := doReqNoFatal(plain, "GET", "http://"+addr+"/healthz")
		if err != nil || code != http.StatusBadRequest || !strings.Contains(body, "Client sent an HTTP request to an HTTPS server") {
			t.Fatalf("plain HTTP to the HTTPS port: %d %q %v, want 400 \"Client sent an HTTP request to an HTTPS server\"", code, body, err)
		}
	}
	// net/http logs the 400 after writing it: wait for the line.
	warn := regexp.MustCompile(`level=WARN msg="a client sent plain HTTP to this HTTPS port \(--tls-cert\): answered 400; the client must use https:// URLs" remote_addr=127\.0\.0\.1:\d+ requests_not_logged=0`)
	deadline = time.Now().Add(10 * time.Second)
	for !warn.MatchString(logs.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning for the plain-HTTP requests in:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "plain HTTP"); n != 1 {
		t.Errorf("%d warnings for three plain-HTTP requests within a minute, want 1:\n%s", n, logs.String())
	}
}

func doReqNoFatal(c *http.Client, method, url string) (int, string, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestTLSConfigBothOrNeither checks the rule "a certificate without a key (or the reverse) or an
// unloadable pair is ErrTLSConfig, before the data dir is touched".
func TestTLSConfigBothOrNeither(t *testing.T) {
	dir := t.TempDir()
	certFile, _, _ := selfSigned(t, dir)
	data := filepath.Join(dir, "data")
	for _, cfg := range []Config{{TLSCertFile: certFile}, {TLSKeyFile: certFile}, {TLSCertFile: certFile, TLSKeyFile: certFile}} {
		cfg.DataDir, cfg.Listen, cfg.Logger = data, freeAddr(t), slog.New(slog.DiscardHandler)
		if err := Run(context.Background(), cfg); !errors.Is(err, ErrTLSConfig) {
			t.Errorf("cert %q key %q: %v, want ErrTLSConfig", cfg.TLSCertFile, cfg.TLSKeyFile, err)
		}
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data dir after refused TLS configs: %v, want none", err)
	}
}

// TestBusyPortLeavesNoDataDir checks the rule "a port already in use is found before the data dir
// is created: Run fails with ErrListen and leaves no dir behind".
func TestBusyPortLeavesNoDataDir(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := filepath.Join(t.TempDir(), "data")
	err = Run(context.Background(), Config{DataDir: data, Listen: ln.Addr().String(), Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, ErrListen) {
		t.Fatalf("Run on a busy port: %v, want ErrListen", err)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data dir after a busy port: %v, want none", err)
	}
}

// TestListenWarning checks the rule "listening beyond loopback without a token logs a warning;
// loopback, or a token, does not".
func TestListenWarning(t *testing.T) {
	for _, tc := range []struct {
		listen, token string
		warn          bool
	}{
		{"127.0.0.1:7070", "", false}, {"localhost:7070", "", false}, {"[::1]:7070", "", false},
		{":7070", "", true}, {"0.0.0.0:7070", "", true}, {"0.0.0.0:7070", testToken, false},
	} {
		var buf strings.Builder
		s := &Server{cfg: Config{Listen: tc.listen, AuthToken: tc.token}, lg: slog.New(slog.NewTextHandler(&buf, nil))}
		s.logSettings(tc.listen, false)
		if got := strings.Contains(buf.String(), "level=WARN"); got != tc.warn {
			t.Errorf("listen %q token %v: warning %v, want %v; log %s", tc.listen, tc.token != "", got, tc.warn, buf.String())
		}
		if strings.Contains(buf.String(), testToken) {
			t.Errorf("the token appears in the log: %s", buf.String())
		}
	}
}

// TestPprofOnlyWhenAskedAndBehindTheToken checks the rule "Go's profiles are served under
// /debug/pprof/ only with Config.Pprof (--pprof), and then only with the auth token when one is
// configured".
func TestPprofOnlyWhenAskedAndBehindTheToken(t *testing.T) {
	_, off := rangeServer(t, Config{AuthToken: testToken}, engine.DumpCacheOptions{})
	if code, _, _ := doReq(t, http.DefaultClient, "GET", off+"/debug/pprof/", "", "Bearer "+testToken); code != http.StatusNotFound {
		t.Errorf("without --pprof: %d, want 404", code)
	}
	_, on := rangeServer(t, Config{AuthToken: testToken, Pprof: true}, engine.DumpCacheOptions{})
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/heap"} {
		if code, _, _ := doReq(t, http.DefaultClient, "GET", on+path, "", ""); code != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d, want 401", path, code)
		}
		if code, _, body := doReq(t, http.DefaultClient, "GET", on+path, "", "Bearer "+testToken); code != http.StatusOK {
			t.Errorf("%s with the token: %d %.200s, want 200", path, code, body)
		}
	}
}
