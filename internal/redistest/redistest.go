// Package redistest starts real redis-server processes on 127.0.0.1 for
// tests: single servers that can be killed and restarted on the same port,
// and small clusters of masters.
//
// When redis-server is not installed the tests that ask for one are skipped,
// unless the environment variable SLUICE_REQUIRE_REDIS is 1, in which case
// they fail.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/loopback"
)

// RequireEnv names the environment variable that turns a missing
// redis-server from a skip into a failure.
const RequireEnv = "SLUICE_REQUIRE_REDIS"

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process bound to 127.0.0.1. Its methods are
// safe for concurrent use.
type Server struct {
	t    testing.TB
	bin  string
	port int
	args []string
	dir  string
	conf string // config file, for a sentinel; first on the command line

	mu     sync.Mutex
	proc   *os.Process // nil while stopped
	exited chan error  // receives the process's exit
}

// Binary returns the path of redis-server, skipping (or failing, see
// RequireEnv) t when it is not installed.
func Binary(t testing.TB) string {
	t.Helper()
	return lookPath(t, "redis-server")
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s not found and %s=1: %v", name, RequireEnv, err)
		}
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}

// Start starts a redis-server on a free 127.0.0.1 port with persistence
// off, plus args, waits until it answers PING and kills it when the test
// ends.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := Binary(t)
	port, err := freePort(false)
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	s := &Server{t: t, bin: bin, port: port, args: args, dir: t.TempDir()}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Kill stops the server at once (SIGKILL) and waits for it to exit. Killing
// a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Kill()
	<-s.exited
	s.proc = nil
}

// Pause stops the server process (SIGSTOP) without closing its sockets:
// clients connect and send but get no answer, as from a hung server.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		_ = s.proc.Signal(sig)
	}
}

// Restart starts the server again on the same port (killing it first if it
// runs) and waits until it answers PING. Its data is gone: persistence is off.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	args = append(args,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
	)
	if s.conf == "" {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	args = append(args, s.args...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(startTimeout)
	for {
		// A server that requires a password answers NOAUTH: it is up.
		reply, err := Command(s.Addr(), "PING")
		if err == nil && reply == "PONG" || err != nil && strings.HasPrefix(err.Error(), "NOAUTH") {
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server on port %d exited at start: %v; log: %s", s.port, err, s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING within %v; log: %s", s.port, startTimeout, s.logTail())
		}
	}
	s.proc, s.exited = cmd.Process, exited
	return nil
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Do sends one command to the server and returns its reply as text, failing
// the test on error. See Command.
func (s *Server) Do(args ...string) string {
	s.t.Helper()
	reply, err := Command(s.Addr(), args...)
	if err != nil {
		s.t.Fatalf("redis %v: %v", args, err)
	}
	return reply
}

// Command sends one command to the Redis server at addr over a fresh
// connection and returns the reply as text: simple strings, errors (as an
// error), integers and bulk strings as themselves, arrays as their elements
// joined by newlines, nil as "". It is meant for test set-up and checks,
// not speed.
func Command(addr string, args ...string) (string, error) {
	return command(addr, 5*time.Second, args...)
}

func command(addr string, timeout time.Duration, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("parsing bulk length %q: %w", line, err)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("parsing array length %q: %w", line, err)
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on. With
// bus set it also makes sure port+10000, the cluster bus port, is free.
func freePort(bus bool) (int, error) { return loopback.FreePort(bus) }
