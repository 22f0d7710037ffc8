package bench

import (
	"net"
	"os"
	"testing"
)

// TestListenerPID: --pin finds the server by the port it listens on; here this process is it.
func TestListenerPID(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pid, err := listenerPID(ln.Addr().(*net.TCPAddr).Port)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("listenerPID = %d, %v; want this process, %d", pid, err, os.Getpid())
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln2.Addr().(*net.TCPAddr).Port
	ln2.Close()
	if _, err := listenerPID(port); err == nil {
		t.Fatalf("listenerPID found a listener on the closed port %d", port)
	}
}
