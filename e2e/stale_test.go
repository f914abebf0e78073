package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestStaleSnapshotKeepsBudget: a request whose json: key body is still
// arriving when a reload changes its policy is decided after the reload,
// under the configuration it started with. Were each such decision to
// start the bucket afresh under the old settings, and the next request
// afresh again under the new ones, a client holding a few slow requests
// over a reload that tightens a limit (an operator's answer to an attack)
// would get a fresh budget at each alternation: 11 through a spent limit
// of 2, as a review found. A changed policy starts fresh once.
func TestStaleSnapshotKeepsBudget(t *testing.T) {
	bruteStores(t, func(t *testing.T, store string) {
		var hits atomic.Int64
		up := newUpstream(t)
		up.Handle = func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }
		cfg := func(limit int) string {
			return fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nlog: {access_log: false}\nstore:\n%s\npolicies:\n  otp-per-phone: {algorithm: sliding_window_log, limit: %d, window: 1h, key: [json:phone]}\nroutes:\n  - {name: otp, upstream: %s, limits: [otp-per-phone]}\n", store, limit, up.URL)
		}
		path := writeConfig(t, cfg(3))
		in := start(t, path)
		body := `{"phone":"+15550100"}`
		send := func() int {
			resp, _ := do(t, nil, "POST", in.HTTP+"/otp", []byte(body), map[string]string{"Content-Type": "application/json"})
			return resp.StatusCode
		}
		for range 3 {
			if got := send(); got != 200 {
				t.Fatalf("spending: %d", got)
			}
		}
		if got := send(); got != 429 {
			t.Fatalf("spent: %d, want 429", got)
		}
		// Six requests with half their body sent.
		var conns []net.Conn
		for range 6 {
			c, err := net.DialTimeout("tcp", strings.TrimPrefix(in.HTTP, "http://"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(c, "POST /otp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:5])
			conns = append(conns, c)
		}
		time.Sleep(200 * time.Millisecond)
		// The limit is lowered to 2.
		if err := os.WriteFile(path, []byte(cfg(2)), 0o600); err != nil {
			t.Fatal(err)
		}
		in.Signal(syscall.SIGHUP)
		if _, ok := in.WaitLog(5*time.Second, "configuration reloaded"); !ok {
			t.Fatal("no reload")
		}
		before := hits.Load()
		var codes []int
		for _, c := range conns {
			// A decision under the old policy, then one under the new.
			c.Write([]byte(body[5:]))
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				resp.Body.Close()
				codes = append(codes, resp.StatusCode)
			}
			codes = append(codes, send())
		}
		if got := hits.Load() - before; got > 2 {
			t.Errorf("after one reload that lowered the limit to 2, %d requests of a spent phone reached the upstream (statuses %v)", got, codes)
		}
	})
}
