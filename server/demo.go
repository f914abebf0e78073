package server

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"text/template"
	"time"

	"github.com/sluicehq/sluice/routes"
)

//go:embed demo.yaml
var demoConfig []byte

// DemoOptions configure Demo.
type DemoOptions struct {
	Listen string // gateway address; default "127.0.0.1:8080"
	Admin  string // admin address; "" turns the admin listener off
	Out    io.Writer
	Log    *slog.Logger
}

// Demo serves the built-in demo until ctx is done: an echo upstream in
// process, the gateway in front of it with one route per algorithm, and
// the admin listener. It prints curl lines that show each algorithm allow,
// queue and reject.
func Demo(ctx context.Context, o DemoOptions) error {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:8080"
	}
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("starting the demo upstream: %w", err)
	}
	echo := &http.Server{Handler: http.HandlerFunc(Echo), ReadHeaderTimeout: 5 * time.Second}
	go echo.Serve(up)
	defer echo.Close()

	env := map[string]string{
		"DEMO_UPSTREAM": "http://" + up.Addr().String(),
		"DEMO_LISTEN":   o.Listen,
		"DEMO_ADMIN":    o.Admin,
	}
	cfg, err := routes.Parse("demo.yaml", demoConfig, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		return fmt.Errorf("loading the demo configuration: %w", err)
	}
	srv, err := NewFromConfig(ctx, "", cfg, o.Log, nil)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	// Print the curl lines once the listeners are up.
	for srv.Addr("http") == nil {
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
	base := "http://" + srv.Addr("http").String()
	adminURL := ""
	if a := srv.Addr("admin"); a != nil {
		adminURL = "http://" + a.String()
	}
	demoText.Execute(o.Out, map[string]string{"Base": base, "Admin": adminURL})
	return <-done
}

var demoText = template.Must(template.New("demo").Parse(strings.TrimLeft(`
sluice demo: the gateway listens on {{.Base}}, in front of an echo upstream.
Every answer carries RateLimit-Policy and RateLimit headers; add -i to see them.

token_bucket, 5 per minute per API key (bursts of 5): the 6th is 429 with Retry-After
  for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w "%{http_code}\n" -H 'X-API-Key: alice' {{.Base}}/token; done
per-key isolation: another key has its own bucket, so this is 200
  curl -si -H 'X-API-Key: bob' {{.Base}}/token | head -n 12

sliding_window_log, 3 OTPs per phone per 10 minutes, exact: the 4th is 429
  for i in 1 2 3 4; do curl -s -w " %{http_code}\n" -o /dev/null -H 'Content-Type: application/json' -d '{"phone":"+15550100"}' {{.Base}}/otp; done
another phone number is not affected: 200
  curl -s -o /dev/null -w "%{http_code}\n" -H 'Content-Type: application/json' -d '{"phone":"+15550199"}' {{.Base}}/otp

leaky_bucket, 2 a second leave for the upstream, 4 may wait: of 8 at once,
5 arrive (1 at once, 4 queued, spaced 500 ms) and 3 are rejected at once
  for i in $(seq 8); do curl -s -o /dev/null -w "%{http_code} %{time_total}s\n" {{.Base}}/orders & done; wait

fixed_window, 10 per minute per client address: the 11th is 429 until the minute turns
  for i in $(seq 11); do curl -s -o /dev/null -w "%{http_code}\n" {{.Base}}/search; done

sliding_window_counter, 4 per 10 s per user cookie: the 5th is 429
  for i in $(seq 5); do curl -s -o /dev/null -w "%{http_code}\n" -b user=carol {{.Base}}/feed; done

no route: 404 problem+json
  curl -s {{.Base}}/nowhere
{{if .Admin}}
admin: metrics, readiness, and one bucket's budget
  curl -s {{.Admin}}/metrics | grep sluice_ratelimit_decisions_total
  curl -s '{{.Admin}}/v1/limits?policy=api-per-key&key=alice'
{{end}}
Ctrl-C stops the demo.
`, "\n")))

// Echo is the demo upstream: it answers with the request it received, as
// JSON.
func Echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"method":  r.Method,
		"path":    r.URL.Path,
		"query":   r.URL.RawQuery,
		"host":    r.Host,
		"headers": r.Header,
		"body":    string(body),
	})
}
