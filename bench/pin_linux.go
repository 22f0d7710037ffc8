package bench

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pinApart pins every thread of this process to the last CPU it may run on, and every thread
// of the server — the process listening on base's TCP port, found through /proc/net/tcp{,6} and
// the processes' socket descriptors — to the others, with sched_setaffinity (Linux only; the
// server must be this user's or this process privileged). Threads started later inherit their
// creator's set. It is `taskset -c 0 kvindex serve` beside `taskset -c 1 kvindex loadgen`
// without starting the server under taskset. The Go runtimes keep the GOMAXPROCS they started
// with (the server's --min-procs), so the server keeps a P free to poll the network.
func pinApart(base string, lg *slog.Logger) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPin, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return fmt.Errorf("%w: the target %s names no port", ErrPin, base)
	}
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return fmt.Errorf("%w: reading this process's CPUs: %w", ErrPin, err)
	}
	cpus := cpuList(&all)
	if len(cpus) < 2 {
		return fmt.Errorf("%w: this process may run on %d CPU; pinning apart needs 2", ErrPin, len(cpus))
	}
	var client, srv unix.CPUSet
	client.Set(cpus[len(cpus)-1])
	for _, c := range cpus[:len(cpus)-1] {
		srv.Set(c)
	}
	pid, err := listenerPID(port)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPin, err)
	}
	if err := pinProcess(pid, &srv); err != nil {
		return fmt.Errorf("%w: the server (pid %d): %w", ErrPin, pid, err)
	}
	if err := pinProcess(os.Getpid(), &client); err != nil {
		return fmt.Errorf("%w: loadgen: %w", ErrPin, err)
	}
	lg.Info("loadgen: pinned apart", "server_pid", pid, "server_cpus", cpus[:len(cpus)-1], "loadgen_cpu", cpus[len(cpus)-1])
	return nil
}

func cpuList(s *unix.CPUSet) []int {
	var out []int
	for c := 0; c < len(s)*64; c++ {
		if s.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// pinProcess sets the CPU set of every thread of pid.
func pinProcess(pid int, set *unix.CPUSet) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: the thread ended
			return err
		}
	}
	return nil
}

// listenerPID finds the process with a socket listening on TCP port.
func listenerPID(port int) (int, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if err := listeningInodes(f, port, inodes); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("no socket listens on port %d here", port)
	}
	procs, err := filepath.Glob("/proc/[0-9]*/fd")
	if err != nil {
		return 0, err
	}
	for _, fdDir := range procs {
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue // another user's process, or gone
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				return strconv.Atoi(filepath.Base(filepath.Dir(fdDir)))
			}
		}
	}
	return 0, fmt.Errorf("the process listening on port %d is not readable by this user", port)
}

// listeningInodes adds the inodes of the sockets of file (/proc/net/tcp's format) that listen
// (state 0A) on port.
func listeningInodes(file string, port int, into map[string]bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
			into[fields[9]] = true
		}
	}
	return sc.Err()
}
