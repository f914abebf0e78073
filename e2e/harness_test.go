// Package e2e runs the real sluice binary against real processes on
// 127.0.0.1: a recording upstream, redis-server, pebble.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the sluice executable built once for the package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", binary, "github.com/sluicehq/sluice/cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sluice:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// instance is one running sluice process.
type instance struct {
	t      testing.TB
	cmd    *exec.Cmd
	config string
	HTTP   string // base URL of the plain listener
	HTTPS  string // base URL of the TLS listener, "" without tls
	Admin  string // base URL of the admin listener, "" when off
	logs   *logBuffer
	exited chan struct{}
	err    error
}

// logBuffer collects the process's JSON log lines.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
	cond  *sync.Cond
}

func (b *logBuffer) add(line string) {
	b.mu.Lock()
	b.lines = append(b.lines, line)
	b.mu.Unlock()
	b.cond.Broadcast()
}

// Lines returns the log lines so far.
func (b *logBuffer) Lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.lines...)
}

// writeConfig writes a config file into a fresh directory and returns its path.
func writeConfig(t testing.TB, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// start runs sluice with the config at path and waits until it listens.
func start(t testing.TB, path string, env ...string) *instance {
	t.Helper()
	in, err := tryStart(t, path, env...)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// tryStart is start that returns the failure instead of ending the test.
func tryStart(t testing.TB, path string, env ...string) (*instance, error) {
	t.Helper()
	in := &instance{t: t, config: path, logs: &logBuffer{}, exited: make(chan struct{})}
	in.logs.cond = sync.NewCond(&in.logs.mu)
	in.cmd = exec.Command(binary, "run", "-config", path)
	in.cmd.Env = append(os.Environ(), env...)
	stderr, err := in.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := in.cmd.Start(); err != nil {
		return nil, err
	}
	started := make(chan map[string]any, 1)
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			in.logs.add(line)
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "sluice started" {
				select {
				case started <- m:
				default:
				}
			}
		}
	}()
	go func() {
		<-logsDone // Wait closes stderr; read everything first
		in.err = in.cmd.Wait()
		close(in.exited)
	}()
	t.Cleanup(func() { in.Stop() })
	select {
	case m := <-started:
		in.HTTP = baseURL("http", m["http"])
		in.HTTPS = baseURL("https", m["https"])
		in.Admin = baseURL("http", m["admin"])
	case <-in.exited:
		return nil, fmt.Errorf("sluice exited before listening: %v\n%s", in.err, strings.Join(in.logs.Lines(), "\n"))
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("sluice did not start within 30s\n%s", strings.Join(in.logs.Lines(), "\n"))
	}
	return in, nil
}

func baseURL(scheme string, v any) string {
	s, _ := v.(string)
	if s == "" {
		return ""
	}
	return scheme + "://" + s
}

// Signal sends sig to the process.
func (in *instance) Signal(sig os.Signal) {
	in.cmd.Process.Signal(sig)
}

// Stop terminates the process (SIGTERM, then SIGKILL after 20 s) and
// returns its exit error.
func (in *instance) Stop() error {
	select {
	case <-in.exited:
		return in.err
	default:
	}
	in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.exited:
	case <-time.After(20 * time.Second):
		in.cmd.Process.Kill()
		<-in.exited
	}
	return in.err
}

// WaitLog waits up to d for a log line containing every one of subs.
func (in *instance) WaitLog(d time.Duration, subs ...string) (string, bool) {
	deadline := time.Now().Add(d)
	for {
		for _, l := range in.logs.Lines() {
			ok := true
			for _, s := range subs {
				if !strings.Contains(l, s) {
					ok = false
					break
				}
			}
			if ok {
				return l, true
			}
		}
		if time.Now().After(deadline) {
			return "", false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recorded is one request as the upstream saw it.
type recorded struct {
	Method string
	Path   string
	Query  string
	Host   string
	Header http.Header
	Body   []byte
	At     time.Time
}

// upstream is a recording HTTP server on 127.0.0.1.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
	// Handle, when set, answers instead of the default 200 echo.
	Handle func(w http.ResponseWriter, r *http.Request)
}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), body, time.Now()})
		h := u.Handle
		u.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "upstream saw %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

// Requests returns what the upstream has received so far.
func (u *upstream) Requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

// do sends a request and returns the response with its body read.
func do(t testing.TB, c *http.Client, method, url string, body []byte, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	if c == nil {
		c = client
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

// client has a transport of its own: httptest.Server.Close closes the
// idle connections of http.DefaultTransport, and one a parallel test had
// just taken from the pool would fail its request ("CloseIdleConnections
// called").
var client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 30 * time.Second}
