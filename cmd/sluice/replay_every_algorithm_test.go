package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// TestGatewayReplayEveryAlgorithm: SPEC §10 and README "Simulator": the
// replay runs the gateway's own decision code, so replaying the
// gateway's access log for a policy gives, for that policy's algorithm,
// the decisions the gateway made: the same requests reaching the
// upstream, the same rejected, the same consumers limited. The gateway
// runs on a virtual clock, stepped between requests, so each request is
// decided at the instant its line records, less the time the upstream
// took, and writes its log as `sluice run` does; clients come through a trusted proxy as IPv4, IPv6 (keyed
// by /64) and IPv4-mapped addresses.
func TestGatewayReplayEveryAlgorithm(t *testing.T) {
	// Five consumers: two sending often, each from two addresses the key
	// makes one, and three now and then, whom no limit should reach.
	busy := []string{"203.0.113.2", "::ffff:203.0.113.2", "2001:db8:1:2::5", "2001:db8:1:2::6"}
	quiet := []string{"203.0.113.1", "2001:db8:9::1", "198.51.100.7"}
	for _, alg := range ratelimit.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := fmt.Sprintf(`
trusted_proxies: [127.0.0.1, "::1"]
policies:
  p: {algorithm: %s, limit: 5, window: 30s, key: [ip]}
routes:
  - {name: api, match: {path_prefix: /api}, upstream: "%%[1]s", limits: [p]}
  - {name: other, match: {path_prefix: /other}, upstream: "%%[1]s"}
`, alg)
			rng := rand.New(rand.NewPCG(7, uint64(len(alg.String()))))
			// The upstream takes up to 1s, on the gateway's clock: each
			// line is written that much after the decision, which the
			// replay must find again from duration_ms.
			takes := func() time.Duration { return time.Duration(rng.IntN(1000)) * time.Millisecond }
			text, log := clockedGatewayLog(t, cfg, takes, func(base string, advance func(time.Duration)) {
				for range 400 {
					advance(time.Duration(rng.IntN(200)) * time.Millisecond)
					path := "/api/x"
					if rng.IntN(10) == 0 {
						path = "/other/x"
					}
					r, _ := http.NewRequest("GET", base+path, nil)
					client := busy[rng.IntN(len(busy))]
					if rng.IntN(20) == 0 {
						client = quiet[rng.IntN(len(quiet))]
					}
					r.Header.Set("X-Forwarded-For", client)
					do(t, r)
				}
			})
			reached, rejected, limited := gatewayConsumers(t, log, "api", "p")
			if limited < 2 || limited == 5 {
				t.Fatalf("the gateway limited %d consumers, want the 2 busy ones and not all 5: the traffic no longer tests what it should", limited)
			}
			sim, stderr := replayLog(t, text, "p", log, alg.String())
			t.Logf("gateway: %d reached, %d rejected, %d limited; replay: %+v", reached, rejected, limited, sim)
			if sim.Accepted != reached || sim.Rejected != rejected || sim.ConsumersLimited != limited {
				t.Errorf("gateway: %d reached the upstream, %d rejected, %d consumers limited; replay of its log: accepted %d, rejected %d, %d consumers limited\nstderr: %s",
					reached, rejected, limited, sim.Accepted, sim.Rejected, sim.ConsumersLimited, stderr)
			}
		})
	}
}

// clockedGatewayLog is gatewayLog on a virtual clock that send steps with
// advance, and the upstream by what takes returns for each request; the
// access log is written as the server writes it.
func clockedGatewayLog(t *testing.T, cfg string, takes func() time.Duration, send func(base string, advance func(time.Duration))) (string, string) {
	t.Helper()
	var elapsed atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		elapsed.Add(int64(takes()))
		io.WriteString(w, "ok\n")
	}))
	t.Cleanup(up.Close)
	text := fmt.Sprintf(cfg, up.URL)
	c, err := routes.Parse("sluice.yaml", []byte(text), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	clock := ratelimit.NewClock(func() time.Time { return time.Date(2026, 3, 9, 10, 0, 0, 0, time.UTC) },
		func() time.Duration { return time.Duration(elapsed.Load()) })
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1, Clock: clock.Now})
	t.Cleanup(func() { store.Close() })
	var log lockedBuf
	g := proxy.New(proxy.Options{Metrics: metrics.New(), Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Clock: clock, AccessLog: &log})
	g.Load(c, store)
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = proxy.WithConn
	srv.Start()
	send(srv.URL, func(d time.Duration) { elapsed.Add(int64(d)) })
	srv.Close()
	return text, log.String()
}

// gatewayConsumers is gatewayCounts with consumers keyed as the policy's
// [ip] keys them (an IPv6 client by its /64, an IPv4-mapped one as IPv4).
func gatewayConsumers(t *testing.T, log, route, policy string) (reached, rejected, limited int) {
	t.Helper()
	keys := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		var m struct {
			Msg, Route, Upstream string
			ClientIP             string `json:"client_ip"`
			RejectedBy           string `json:"rejected_by"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m.Msg != "request" || m.Route != route {
			continue
		}
		if m.Upstream != "" {
			reached++
		}
		if m.RejectedBy == policy {
			rejected++
			keys[clientKey(t, m.ClientIP)] = true
		}
	}
	return reached, rejected, len(keys)
}

func clientKey(t *testing.T, addr string) string {
	t.Helper()
	a, err := netip.ParseAddr(addr)
	if err != nil {
		t.Fatalf("client_ip %q: %v", addr, err)
	}
	return string(routes.AppendClient(nil, a))
}
