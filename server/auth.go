package server

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// Errors of the auth and TLS configuration. Check them with errors.Is.
var (
	// ErrAuthTokenFile: the --auth-token-file cannot be read or holds no token.
	ErrAuthTokenFile = errors.New("auth token file")
	// ErrTLSConfig: only one of the TLS certificate and key was given, or they do not load.
	ErrTLSConfig = errors.New("TLS configuration")
)

// ReadAuthToken reads a bearer token from path: the file's content with surrounding white space
// trimmed. An empty token is an error (it would protect nothing).
func ReadAuthToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrAuthTokenFile, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: %s is empty", ErrAuthTokenFile, path)
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("%w: %s: the token must be one line without spaces", ErrAuthTokenFile, path)
	}
	return tok, nil
}

// authorized checks the bearer token of a mutating request when a token is configured; otherwise
// it answers 401 with a WWW-Authenticate challenge and returns false. The comparison takes the
// same time whatever the token's content.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.AuthToken == "" {
		return true
	}
	got, ok := bearer(r.Header.Get("Authorization"))
	if ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.AuthToken)) == 1 {
		return true
	}
	msg := "this route needs Authorization: Bearer <token> (the server runs with --auth-token-file)"
	if ok {
		msg = "wrong bearer token"
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="kvindex"`)
	writeError(w, http.StatusUnauthorized, msg)
	return false
}

// bearer extracts the token of an "Authorization: Bearer <token>" header (scheme case-insensitive).
func bearer(h string) (string, bool) {
	scheme, tok, found := strings.Cut(strings.TrimSpace(h), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// isLoopbackListen reports whether a listen address only accepts connections from this machine:
// a loopback IP or "localhost". An empty host (all interfaces) is not.
func isLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
