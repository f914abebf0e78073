package server

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestKeepAliveConnectionsTakeTurns: a connection whose next request has
// already arrived is not served again before the others have had a turn.
// Two clients each pipeline all their requests in one write, so neither
// connection ever waits for the network; on one processor, without
// takeTurns, the connection that goes first is served every request it
// has before the other gets one (the longest run is n-1). The race
// detector's scheduler cuts such runs short at random, so under -race a
// missing yield is caught in most runs rather than in every one.
//
// Not parallel: it runs the scheduler on one processor.
func TestKeepAliveConnectionsTakeTurns(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n = 40
	var (
		mu    sync.Mutex
		seen  = map[string]bool{}
		order []string
		both  sync.WaitGroup // each connection's first request waits for the other's
	)
	both.Add(2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.Header.Get("X-Client")
		mu.Lock()
		first := !seen[c]
		seen[c] = true
		if !first {
			order = append(order, c)
		}
		mu.Unlock()
		if first {
			both.Done()
			both.Wait()
		}
	})
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := s.httpServer(h, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	var clients sync.WaitGroup
	for _, name := range []string{"A", "B"} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		req := "GET / HTTP/1.1\r\nHost: sluice.test\r\nX-Client: " + name + "\r\n\r\n"
		if _, err := conn.Write([]byte(strings.Repeat(req, n))); err != nil {
			t.Fatal(err)
		}
		clients.Go(func() {
			// Read until the last answer's end: the empty body of an
			// answer with Content-Length: 0 ends it.
			var got []byte
			buf := make([]byte, 4096)
			for bytes.Count(got, []byte("HTTP/1.1 200")) < n {
				k, err := conn.Read(buf)
				if err != nil {
					t.Errorf("client %s: %v after %d answers", name, err, bytes.Count(got, []byte("HTTP/1.1 200")))
					return
				}
				got = append(got, buf[:k]...)
			}
		})
	}
	clients.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(order) != 2*(n-1) {
		t.Fatalf("got %d requests after the first of each, want %d", len(order), 2*(n-1))
	}
	longest, run := 0, 0
	for i := range order {
		if i > 0 && order[i] == order[i-1] {
			run++
		} else {
			run = 1
		}
		longest = max(longest, run)
	}
	// Taking turns gives runs of 1 or 2; the scheduler's choices around
	// the first requests may lengthen one a little.
	if longest > 4 {
		t.Errorf("longest run of one connection's requests: got %d, want at most 4 (order %s)", longest, strings.Join(order, ""))
	}
}
