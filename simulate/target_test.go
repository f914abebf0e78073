package simulate

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// TestReplayInvalidRawPathAsGateway, against the real gateway: a target
// whose raw path is no valid escaping (a '|' or '{' as curl sends it)
// makes the gateway drop RawPath and key the decoded path, where %3B is a
// ';' whose parameters the path source strips; replay must key it alike:
// one gateway bucket, one consumer.
func TestReplayInvalidRawPathAsGateway(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	cfg, err := routes.Parse("sluice.yaml", []byte(fmt.Sprintf(`
routes:
  - name: api
    match: {path_prefix: /}
    upstream: %s
    limits: [{algorithm: fixed_window, limit: 1, window: 1m, key: [path]}]
`, up.URL)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	g := proxy.New(proxy.Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	g.Load(cfg, store)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	get := func(target string) int {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	a, b := "/v1/a%3Bb|c", "/v1/a"
	codeA, codeB := get(a), get(b)
	sameBucket := codeA == 200 && codeB == 429

	ng := func(target string) string {
		return `203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET ` + target + ` HTTP/1.1" 200 0 "-" "curl/8"` + "\n"
	}
	keys := replayKeys(t, ng(a)+ng(b), "path")
	if sameBucket != (keys[0] == keys[1]) {
		t.Errorf("gateway: %s then %s answered %d, %d (one bucket: %v); replay keys them %q (one consumer: %v)",
			a, b, codeA, codeB, sameBucket, keys, keys[0] == keys[1])
	}
}
