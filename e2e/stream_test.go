package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStreamedResponsesReachTheClientAtOnce proves that a server-sent
// event, and a chunk of a response of unknown length, reach the client
// while the upstream is still answering: the upstream holds its response
// open until the client has read the first part.
func TestStreamedResponsesReachTheClientAtOnce(t *testing.T) {
	t.Parallel()
	released := map[string]chan struct{}{"/sse": make(chan struct{}), "/chunked": make(chan struct{})}
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		release := released[r.URL.Path]
		if r.URL.Path == "/sse" {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/x-ndjson")
		}
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		case <-time.After(10 * time.Second):
		}
		fmt.Fprint(w, "data: last\n\n")
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
routes:
  - name: events
    upstream: %s
    limits: [{algorithm: token_bucket, limit: 100, window: 1s, key: [ip]}]
`, up.URL)
	in := start(t, writeConfig(t, cfg))
	for path, release := range released {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			c := &http.Client{Timeout: 8 * time.Second}
			resp, err := c.Get(in.HTTP + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.Header.Get("RateLimit") == "" {
				t.Errorf("streamed response carries no RateLimit header")
			}
			lines := make(chan string)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			select {
			case got := <-lines:
				if got != "data: first" {
					t.Fatalf("first line: got %q, want %q", got, "data: first")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the first event did not reach the client while the upstream was still answering")
			}
			close(release)
			var rest []string
			for l := range lines {
				rest = append(rest, l)
			}
			if got, want := strings.Join(rest, "|"), "|data: last|"; got != want {
				t.Errorf("rest of the stream: got %q, want %q", got, want)
			}
		})
	}
}
